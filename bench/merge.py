"""One report from several runs, each of some N: at N = 1000 the four contenders alone take well
over an hour, so a full report may be made one N (or a few) at a time.

A run normally holds every contender for its N, so each ratio compares contenders measured side
by side. A run that stopped early may be completed by one of the contenders it missed; the report
then says which N were measured in more than one run. Runs are merged only when they measured the
same thing: the same settings, the same versions of what both ran (the operator's commit
included) and no contender measured twice at one N.
"""

from __future__ import annotations

from typing import Any

# Settings that must agree; "ns" is what the runs split between them.
SAME_CONFIG = (
    "repetitions",
    "concurrency",
    "drift_changes",
    "drift_timeout",
    "idle_seconds",
    "drift_budget",
)


class MergeError(ValueError):
    """The runs did not measure the same thing."""


def _check_same(parts: list[dict[str, Any]], where: str, keys: tuple[str, ...] | None = None) -> None:
    """``keys`` must agree; without them, every key both runs have (a run without the SDK has no
    SDK version)."""
    first = parts[0].get(where) or {}
    for i, part in enumerate(parts[1:], start=2):
        other = part.get(where) or {}
        for key in keys or tuple(sorted(set(first) & set(other))):
            if first.get(key) != other.get(key):
                raise MergeError(
                    f"run {i} differs from run 1 in {where}.{key}: {other.get(key)!r} vs {first.get(key)!r}"
                )


def merge(parts: list[dict[str, Any]], full_ns: list[int]) -> dict[str, Any]:
    """The runs as one results document (``parts`` keeps what each run was)."""
    if len(parts) == 1:
        return parts[0]
    _check_same(parts, "config", SAME_CONFIG)
    _check_same(parts, "versions")
    seen: dict[tuple[str, int, int], int] = {}
    for i, part in enumerate(parts, start=1):
        for run in part.get("runs", []):
            key = (run["contender"], run["n"], run["rep"])
            if key in seen and seen[key] != i:
                what = f"{key[0]} at N={key[1]} (repetition {key[2] + 1})"
                raise MergeError(f"{what} is in runs {seen[key]} and {i}")
            seen[key] = i
    ns = sorted({n for part in parts for n in (part.get("config") or {}).get("ns", [])})
    contenders: list[str] = []
    for part in parts:
        contenders += [c for c in (part.get("config") or {}).get("contenders", []) if c not in contenders]
    notes: list[str] = []
    for part in parts:
        notes += [n for n in part.get("notes") or [] if n not in notes]
    errors = [f"run {i}: {p['error']}" for i, p in enumerate(parts, start=1) if p.get("error")]
    merged: dict[str, Any] = {
        **parts[0],
        "mode": "full" if ns == full_ns else "custom",
        "config": {**parts[0]["config"], "ns": ns, "contenders": contenders},
        "versions": {k: v for part in reversed(parts) for k, v in (part.get("versions") or {}).items()},
        "machine": _machine(parts),
        "runs": [run for part in parts for run in part.get("runs", [])],
        "split": _split(parts),
        "notes": notes,
        "started": " / ".join(str(p.get("started", "?")) for p in parts),
        "wall_seconds": sum(float(p.get("wall_seconds") or 0) for p in parts),
        "load_average_end": parts[-1].get("load_average_end"),
        "background": next((p["background"] for p in parts if p.get("background")), None),
        "parts": [
            {
                "command": p.get("command"),
                "started": p.get("started"),
                "wall_seconds": p.get("wall_seconds"),
                "ns": (p.get("config") or {}).get("ns"),
                "contenders": (p.get("config") or {}).get("contenders"),
                "load_average_start": (p.get("machine") or {}).get("load_average_start"),
                "load_average_end": p.get("load_average_end"),
            }
            for p in parts
        ],
    }
    if errors:
        merged["error"] = "; ".join(errors)
    else:
        merged.pop("error", None)
    return merged


def _split(parts: list[dict[str, Any]]) -> list[str]:
    """Each N whose contenders were measured in more than one run, with which run measured which:
    ratios at that N compare runs made apart."""
    where: dict[int, dict[int, list[str]]] = {}
    for i, part in enumerate(parts, start=1):
        for run in part.get("runs", []):
            got = where.setdefault(run["n"], {}).setdefault(i, [])
            if run["contender"] not in got:
                got.append(run["contender"])
    return [
        f"N={n}: " + "; ".join(f"{', '.join(cs)} in run {i}" for i, cs in sorted(by_part.items()))
        for n, by_part in sorted(where.items())
        if len(by_part) > 1
    ]


def _machine(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The machine facts of all runs: a fact the runs differ in (another CPU model, a kernel
    update between sessions) names each run's value; each run's load is in its own row."""
    facts: dict[str, Any] = {}
    for key in dict.fromkeys(k for p in parts for k in p.get("machine") or {}):
        values = [(p.get("machine") or {}).get(key) for p in parts]
        if key == "load_average_start" or all(v == values[0] for v in values):
            facts[key] = values[0]
        else:
            facts[key] = " / ".join(f"{v} (run {i})" for i, v in enumerate(values, start=1))
    return facts
