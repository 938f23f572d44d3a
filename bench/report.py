"""Render REPORT.md from the results JSON: a pure function of the data (no clock, no I/O), so the
same JSON always gives the same report and the arithmetic is unit-tested.

Times are medians over repetitions; ratios are taken between medians measured in the same run,
which is what makes them meaningful on a shared, noisy machine where absolute seconds are not.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

from bench import profile
from bench.stats import growth, median, percentile, rate_per_minute, ratio

FLOOR, OURS, PEER, LEAN = "helm", "ours", "sdk", "helm-lean"
TARGET_N = 1000
TITLES = {OURS: "ours", FLOOR: "helm (floor)", LEAN: "helm, as ours runs it", PEER: "Operator SDK"}
ORDER = (OURS, FLOOR, LEAN, PEER)

Run = dict[str, Any]


# -- picking data ---------------------------------------------------------------------------
def runs_for(results: dict[str, Any], contender: str, n: int) -> list[Run]:
    return [r for r in results.get("runs", []) if r["contender"] == contender and r["n"] == n]


def ns_of(results: dict[str, Any]) -> list[int]:
    return sorted({r["n"] for r in results.get("runs", [])})


def contenders_of(results: dict[str, Any]) -> list[str]:
    seen = {r["contender"] for r in results.get("runs", [])}
    return [c for c in ORDER if c in seen] + sorted(seen - set(ORDER))


def first_with(results: dict[str, Any], contender: str, n: int, key: str) -> Any:
    """A once-per-N scenario's data (drift, idle, footprint, restart ran in one repetition)."""
    for r in runs_for(results, contender, n):
        if r.get(key) is not None:
            return r[key]
    return None


def wave_median(results: dict[str, Any], contender: str, n: int, scenario: str, key: str) -> float | None:
    return median([(r.get(scenario) or {}).get(key) for r in runs_for(results, contender, n)])


def drift_latencies(drift: dict[str, Any] | None, kind: str | None = None) -> list[float]:
    """Latencies with "not corrected" counted as infinite: percentiles then stay honest."""
    if not drift:
        return []
    return [
        math.inf if c["latency_s"] is None else c["latency_s"]
        for c in drift["changes"]
        if kind is None or c["kind"] == kind
    ]


def idle_request_rate(results: dict[str, Any], contender: str, n: int) -> dict[str, float | None]:
    """API requests per CR per minute while idle: raw (whole API server) and net of the background
    (the floor's idle window at the same N: the same objects, no operator)."""
    idle = first_with(results, contender, n, "idle")
    if not idle:
        return {"raw": None, "net": None, "growth": None}
    total = idle["requests_first_half"] + idle["requests_second_half"]
    background = first_with(results, FLOOR, n, "idle") if contender != FLOOR else None
    if background is None and results.get("background"):
        background = results["background"]
    net = None
    if background:
        bg_total = background["requests_first_half"] + background["requests_second_half"]
        bg_rate = bg_total / background["seconds"]
        net = rate_per_minute(max(0.0, total - bg_rate * idle["seconds"]), idle["seconds"], n)
    return {
        "raw": rate_per_minute(total, idle["seconds"], n),
        "net": net,
        "growth": growth(idle["requests_first_half"], idle["requests_second_half"]),
    }


# -- formatting -------------------------------------------------------------------------------
def num(x: float | None, digits: int = 2, unit: str = "") -> str:
    if x is None:
        return "n/a"
    if math.isinf(x):
        return "∞"
    return f"{x:.{digits}f}{unit}"


def times(x: float | None) -> str:
    return "n/a" if x is None else ("∞" if math.isinf(x) else f"{x:.2f}x")


def table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


# -- targets ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    target: str
    measured: str
    verdict: str  # "met", "missed", "not measured"
    margin: str


def _action_processes(wave: dict[str, Any], n: int) -> float | None:
    """``helm install``/``upgrade`` processes per release in a wave; a ``helm version`` the
    operator runs once per process (at its first action) is not per release."""
    calls = wave.get("helm_subcommands")
    if calls is None:
        return cast(float | None, wave.get("helm_calls_per_release"))
    return (int(calls.get("upgrade", 0)) + int(calls.get("install", 0))) / n


def _check(
    target: str,
    value: float | None,
    limit: float,
    fmt: Callable[[float | None], str],
    strict: bool = False,
    where: str = "",
) -> Verdict:
    if value is None:
        return Verdict(target, "n/a", "not measured", "")
    ok = value < limit if strict else value <= limit
    measured = fmt(value) + (f" {where}" if where else "")
    if math.isinf(value):
        margin = "never reached"
    else:
        margin = f"{fmt(abs(limit - value))} {'headroom' if ok else 'over'}"
    return Verdict(target, measured, "met" if ok else "missed", margin)


def _worst(values: Iterable[tuple[int, float | None]]) -> tuple[float | None, str]:
    got = [(v, n) for n, v in values if v is not None]
    if not got:
        return None, ""
    v, n = max(got)
    return v, f"(worst: N={n})"


def _at_target_n(results: dict[str, Any]) -> tuple[int, str]:
    n = max(ns_of(results) or [0])
    note = "" if n == TARGET_N else f"(at N={n}; the target is for N={TARGET_N})"
    return n, note


def targets(results: dict[str, Any]) -> list[Verdict]:
    """The stated targets, each with the measured value, met/missed and the margin."""
    ns = ns_of(results)
    out: list[Verdict] = []
    for scenario, label in (("convergence", "Convergence"), ("update", "Update wave")):

        def r(ref: str, scenario: str = scenario) -> list[tuple[int, float | None]]:
            return [
                (
                    n,
                    ratio(
                        wave_median(results, OURS, n, scenario, "seconds"),
                        wave_median(results, ref, n, scenario, "seconds"),
                    ),
                )
                for n in ns
            ]

        v, where = _worst(r(FLOOR))
        out.append(_check(f"{label} within 1.15x the floor at every N", v, 1.15, times, where=where))
        v, where = _worst(r(PEER))
        out.append(_check(f"{label} faster than the SDK at every N", v, 1.0, times, strict=True, where=where))
    for scenario, what in (("convergence", "install"), ("update", "upgrade")):
        per = [
            (n, _action_processes(r.get(scenario) or {}, n)) for n in ns for r in runs_for(results, OURS, n)
        ]
        v, where = _worst(per)
        label = f"Exactly one helm process per {what} (the breakdown below lists any other)"
        out.append(_check(label, v, 1.0, lambda x: num(x, 2), where=where))
    off = [
        (n, float((r.get("update") or {}).get("releases_with_other_revision_count", 0)))
        for n in ns
        for r in runs_for(results, OURS, n)
        if r.get("update")
    ]
    v, where = _worst(off)
    out.append(
        _check(
            "Update: exactly one new Helm revision per CR (releases with another count)",
            v,
            0,
            lambda x: num(x, 0),
            where=where,
        )
    )
    idle_calls = [(n, (first_with(results, OURS, n, "idle") or {}).get("helm_calls")) for n in ns]
    v, where = _worst(idle_calls)
    out.append(_check("Zero helm processes while idle (resyncs)", v, 0, lambda x: num(x, 0), where=where))
    restart_calls = [(n, (first_with(results, OURS, n, "restart") or {}).get("helm_calls")) for n in ns]
    v, where = _worst(restart_calls)
    out.append(
        _check("Zero helm processes on a restart with unchanged CRs", v, 0, lambda x: num(x, 0), where=where)
    )

    n, note = _at_target_n(results)
    lat = drift_latencies(first_with(results, OURS, n, "drift"))
    p50 = percentile(lat, 50) if lat else None
    p95 = percentile(lat, 95) if lat else None
    out.append(_check("Drift correction p50 ≤ 0.5 s", p50, 0.5, lambda x: num(x, 2, " s"), where=note))
    out.append(_check("Drift correction p95 ≤ 2 s", p95, 2.0, lambda x: num(x, 2, " s"), where=note))
    idle = first_with(results, OURS, n, "idle") or {}
    out.append(
        _check(
            "Idle CPU < 1 % of one core",
            idle.get("cpu_pct"),
            1.0,
            lambda x: num(x, 2, " %"),
            strict=True,
            where=note,
        )
    )
    g = idle_request_rate(results, OURS, n)["growth"]
    out.append(
        _check(
            "Idle API request rate not growing (2nd half ≤ 1.2x 1st half)",
            g,
            1.2,
            times,
            where=note,
        )
    )
    fp = first_with(results, OURS, n, "footprint") or {}
    out.append(
        _check("Peak RSS ≤ 200 MiB", fp.get("rss_peak_mib"), 200.0, lambda x: num(x, 0, " MiB"), where=note)
    )
    return out


# -- the report -------------------------------------------------------------------------------
def _parallel(runs: list[Run], scenario: str) -> str:
    """How many helm processes ran at once while releases were pending (first repetition): below
    C means the contender did not use the parallelism it was given."""
    data = runs[0].get(scenario) or {}
    if data.get("helm_parallel_max") is None:
        return "n/a"
    return f"{data['helm_parallel_mean']:.1f} / {data['helm_parallel_max']}"


def _wave_table(results: dict[str, Any], scenario: str) -> list[str]:
    rows = []
    for n in ns_of(results):
        floor = wave_median(results, FLOOR, n, scenario, "seconds")
        peer = wave_median(results, PEER, n, scenario, "seconds")
        lean = wave_median(results, LEAN, n, scenario, "seconds")
        for c in contenders_of(results):
            runs = runs_for(results, c, n)
            if not runs:
                continue
            sec = wave_median(results, c, n, scenario, "seconds")
            revisions = [(r.get(scenario) or {}) for r in runs]
            lo = min((x.get("revisions_min", 0) for x in revisions), default=0)
            hi = max((x.get("revisions_max", 0) for x in revisions), default=0)
            rows.append(
                [
                    str(n),
                    TITLES.get(c, c),
                    f"{num(sec)} (n={len(runs)})",
                    times(ratio(sec, floor)) if c != FLOOR else "1.00x",
                    times(ratio(sec, peer)) if c != PEER else "1.00x",
                    times(ratio(sec, lean)) if c != LEAN else "1.00x",
                    num(wave_median(results, c, n, scenario, "deployed_s")),
                    num(wave_median(results, c, n, scenario, "ready_s")),
                    num(wave_median(results, c, n, scenario, "cpu_s")),
                    num(wave_median(results, c, n, scenario, "own_cpu_s")),
                    num(wave_median(results, c, n, scenario, "helm_calls_per_release")),
                    _parallel(runs, scenario),
                    str(lo) if lo == hi else f"{lo} to {hi}",
                ]
            )
    header = [
        "N",
        "contender",
        "time s (median)",
        "x floor",
        "x SDK",
        "x helm, same flags",
        "releases deployed s",
        "all Ready s",
        "CPU s",
        "operator's own CPU s",
        "helm processes / release",
        "helm in parallel (mean / max)",
        "latest Helm revision",
    ]
    return table(header, rows)


def _helm_breakdown(results: dict[str, Any], scenario: str) -> list[str]:
    """Which helm subcommands ours ran (a count above one per release says which call is extra)."""
    out = []
    for n in ns_of(results):
        for r in runs_for(results, OURS, n):
            sub = (r.get(scenario) or {}).get("helm_subcommands")
            if sub:
                counts = ", ".join(f"`{k}` {v}" for k, v in sub.items())
                out.append(f"ours' helm processes at N={n} (repetition {r['rep'] + 1}): {counts}.")
    return ["", *out] if out else []


def _drift_table(results: dict[str, Any]) -> list[str]:
    rows = []
    for n in ns_of(results):
        for c in contenders_of(results):
            if not runs_for(results, c, n):
                continue
            drift = first_with(results, c, n, "drift")
            if not drift:
                rows.append([str(n), TITLES.get(c, c), "all", "n/a (no drift correction)", "", "", "", ""])
                continue
            kinds = sorted({ch["kind"] for ch in drift["changes"]})
            for kind in [*kinds, None]:
                lat = drift_latencies(drift, kind)
                missed = sum(1 for x in lat if math.isinf(x))
                rows.append(
                    [
                        str(n),
                        TITLES.get(c, c),
                        kind or "**all**",
                        f"{len(lat) - missed}/{len(lat)}",
                        num(percentile(lat, 50)),
                        num(percentile(lat, 95)),
                        num(max(lat)),
                        _missed(missed, drift, kind),
                    ]
                )
    return table(["N", "contender", "change", "corrected", "p50 s", "p95 s", "max s", "timeouts"], rows)


def _missed(missed: int, drift: dict[str, Any], kind: str | None) -> str:
    text = f"{missed} not corrected within {drift['timeout_s']:g} s" if missed else "0"
    skipped = drift.get("skipped") or 0
    if kind is None and skipped:
        why = drift.get("stopped") or f"given up after {drift.get('give_up')} in a row"
        text += f"; {skipped} more not made ({why})"
    return text


def _idle_table(results: dict[str, Any]) -> list[str]:
    rows = []
    for n in ns_of(results):
        for c in contenders_of(results):
            idle = first_with(results, c, n, "idle")
            if not idle:
                continue
            rate = idle_request_rate(results, c, n)
            halves = f"{num(idle.get('cpu_pct_first_half'))} → {num(idle.get('cpu_pct_second_half'))}"
            calls = idle.get("helm_calls")
            in_process = "n/a (in-process)"
            if idle.get("reconciles") is not None:
                in_process = f"n/a (in-process: {idle['reconciles']:.0f} reconciles, each a dry-run upgrade)"
            rows.append(
                [
                    str(n),
                    TITLES.get(c, c),
                    f"{idle['seconds']:.0f}",
                    num(idle.get("cpu_pct")),
                    halves if idle.get("cpu_pct") is not None else "n/a",
                    num(calls, 0) if calls is not None else ("0 (no process)" if c == FLOOR else in_process),
                    num(rate["raw"], 3),
                    "(background)" if c == FLOOR else num(rate["net"], 3),
                    times(rate["growth"]),
                ]
            )
    header = [
        "N",
        "contender",
        "window s",
        "CPU % of one core",
        "1st → 2nd half %",
        "helm processes",
        "API req / CR / min (raw)",
        "net of background",
        "request growth",
    ]
    return [*table(header, rows), *_request_growth(results)]


def _request_growth(results: dict[str, Any]) -> list[str]:
    """What the requests of an operator's idle window were, where the second half made more."""
    lines = []
    for n in ns_of(results):
        for c in contenders_of(results):
            idle = first_with(results, c, n, "idle")
            by = (idle or {}).get("requests_by")
            if c == FLOOR or not by or idle_request_rate(results, c, n)["growth"] in (None, 0):
                continue
            top = sorted(by.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:6]
            parts = ", ".join(f"{k} {a:.0f} → {b:.0f}" for k, (a, b) in top)
            lines.append(
                f"- N={n}, {TITLES.get(c, c)}, requests by verb and resource (1st → 2nd half): {parts}"
            )
    return ["", *lines] if lines else []


def _footprint_restart_table(results: dict[str, Any]) -> list[str]:
    rows = []
    for n in ns_of(results):
        for c in contenders_of(results):
            if c in (FLOOR, LEAN) or not runs_for(results, c, n):
                continue
            fp = first_with(results, c, n, "footprint") or {}
            rs = first_with(results, c, n, "restart") or {}
            calls = rs.get("helm_calls")
            in_process = "n/a (in-process)"
            if rs.get("reconciles") is not None:
                in_process = f"n/a (in-process: {rs['reconciles']} reconciles, each a dry-run upgrade)"
            rows.append(
                [
                    str(n),
                    TITLES.get(c, c),
                    num(fp.get("rss_peak_mib"), 0),
                    num(fp.get("rss_steady_mib"), 0),
                    num(rs.get("seconds")),
                    num(calls, 0) if calls is not None else in_process,
                ]
            )
    header = [
        "N",
        "contender",
        "RSS peak MiB",
        "RSS steady MiB",
        "restart: all CRs resumed s",
        "helm processes",
    ]
    return table(header, rows)


def _complete(results: dict[str, Any]) -> bool:
    """Whether runs merged together measured every contender at every N (and repetition)."""
    cfg = results.get("config") or {}
    measured = {(r["contender"], r["n"], r["rep"]) for r in results.get("runs", [])}
    wanted = {
        (c, n, rep)
        for c in cfg.get("contenders") or []
        for n in cfg.get("ns") or []
        for rep in range(int(cfg.get("repetitions") or 1))
    }
    return bool(results.get("parts")) and bool(wanted) and wanted <= measured


def _provenance(results: dict[str, Any]) -> list[str]:
    """When and how the numbers were made: one run, or one run per N (see ``bench.merge``)."""
    parts = results.get("parts")
    if not parts:
        return [
            f"Run {results.get('started', '?')} ({results.get('mode', '?')} mode, "
            f"{num(results.get('wall_seconds'), 0)} s wall), reproduced with:",
            "",
            "```",
            results.get("command", "python -m bench"),
            "```",
        ]
    split = results.get("split") or []
    lines = [
        f"{results.get('mode', '?').capitalize()} mode, made in {len(parts)} runs on machines of this kind",
        "from one commit with the same settings (a run of all N takes longer than a machine can be held",
        "quiet), each holding every contender for its N" + (", but for:" if split else "; reproduced with:"),
    ]
    if split:
        lines += [
            "",
            *(f"- {s}" for s in split),
            "",
            "At such an N the ratios compare contenders measured in different runs of the same commit;",
            "reproduced with:",
        ]
    lines += ["", "```", *(str(p.get("command")) for p in parts), "```", ""]
    rows = [
        [
            ", ".join(str(n) for n in p.get("ns") or []),
            str(p.get("started", "?")),
            num(p.get("wall_seconds"), 0),
            " / ".join(str(x) for x in p.get("load_average_start") or []),
            " / ".join(str(x) for x in p.get("load_average_end") or []),
            ", ".join(p.get("contenders") or []) or "all",
        ]
        for p in parts
    ]
    header = ["N", "started", "wall s", "load average at start", "at the end", "contenders"]
    return lines + table(header, rows)


def render(results: dict[str, Any], plots: dict[str, str] | None = None) -> str:
    """The Markdown report for ``results`` (``plots``: title → relative path of each PNG)."""
    plots = plots or {}
    cfg, machine = results.get("config", {}), results.get("machine", {})
    lines = ["# Benchmark: ours vs plain helm vs the Operator SDK Helm operator", "", *_provenance(results)]
    lines += [
        "",
        "All contenders ran one at a time on the same local control plane in the same run, with the",
        "same chart (`bench/charts/podinfo`), release names, values and concurrency "
        f"C={cfg.get('concurrency')} ({cfg.get('repetitions')} repetition(s), contender order rotated per "
        "repetition).",
        "The machine is shared: read the **ratios**; absolute seconds move with the load.",
    ]
    load, cpus = (machine.get("load_average_start") or [0])[0], machine.get("nproc") or 0
    if cpus and load > cpus:
        lines += [
            "",
            f"**The machine was busy** when the run started (load average {load} on {cpus} CPUs): absolute",
            "times are inflated and noisy; compare contenders by the ratios, and re-run on a quiet machine.",
        ]
    if results.get("error") and _complete(results):
        lines += [
            "",
            f"**A run stopped early:** `{results['error'].splitlines()[0]}`; a later run measured",
            "what it did not, so every contender was measured at every N.",
        ]
    elif results.get("error"):
        lines += ["", f"**The run failed:** `{results['error'].splitlines()[0]}` (partial data below)."]
    for left in results.get("left_behind") or []:
        lines += ["", f"**A namespace was not deleted in time** (later contenders ran beside it): {left}"]
    lines += [
        "",
        "## Targets",
        "",
        *table(
            ["target", "measured", "verdict", "margin"],
            (
                [v.target, v.measured, f"**{v.verdict}**" if v.verdict == "missed" else v.verdict, v.margin]
                for v in targets(results)
            ),
        ),
        *(
            [
                "",
                "## Reading of this run: what was missed or not measured, and why",
                "",
                results["analysis"].strip(),
            ]
            if results.get("analysis")
            else []
        ),
        "",
        "## Convergence: N custom resources applied at once",
        "",
        "Time from the first write until every release has revision 1 deployed (Helm's release Secrets)",
        "and, for the operators, every CR reports it (ours: `Released=True` for the current generation;",
        "the SDK: `Deployed=True` with the new manifest in `status.deployedRelease`). Ours also says when",
        'the workloads are ready (`Ready=True`), which the SDK does not: "all Ready s" is when every CR',
        "said so, which waits for the cluster's controllers and KWOK to roll the Pods out. CPU is counted",
        'until then: "CPU s" is the contender\'s whole process tree (helm included), "operator\'s own',
        'CPU s" the operator process alone (for ours: everything but helm and the post-renderer script).',
        "",
        *_wave_table(results, "convergence"),
        *_helm_breakdown(results, "convergence"),
        "",
        "## Update wave: one value changed in all N",
        "",
        *_wave_table(results, "update"),
        *_helm_breakdown(results, "update"),
        "",
        "## Drift correction",
        "",
        "One manual change at a time (ConfigMap data edited, Deployment scaled, Service deleted;",
        "round-robin over the releases); time from the API server accepting the change until a 50 ms poll",
        "sees the object as the chart renders it. Changes not corrected within the timeout count as ∞ in",
        "the percentiles.",
        "",
        *_drift_table(results),
        "",
        "## Idle",
        "",
        "N unchanged CRs, after a settle period. CPU is the contender's process tree (children included);",
        "API requests are the API server's `apiserver_request_total` (resource requests) over the window,",
        "with the contender alone on the cluster; the floor's window is the background (controllers,",
        'KWOK), and "net" subtracts it. The counter has no user label, hence this attribution by isolation.',
        "",
        *_idle_table(results),
        "",
        "## Footprint and restart",
        "",
        "RSS of the operator process alone (ours: the Python process, not its helm children). Restart: the",
        "operator is stopped (SIGTERM) and started again with N unchanged CRs; time from the start until",
        "every CR has been handled (ours: `/readyz` answers 200, which it does once every CR of its first",
        'listing was handled; the SDK: a "Reconciled release" log line for every CR).',
        "",
        *_footprint_restart_table(results),
    ]
    if results.get("profile"):
        lines += ["", *profile.render(results["profile"])]
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{title}]({path})" for title, path in plots.items()]
    lines += ["", "## How each contender ran", ""]
    for c, how in (results.get("commands") or {}).items():
        lines.append(f"- **{TITLES.get(c, c)}**: {how}")
    lines += ["", "## Machine and versions", ""]
    load = machine.get("load_average_start") or []
    facts = [
        ["CPUs (nproc)", str(machine.get("nproc"))],
        ["CPU model", str(machine.get("cpu_model"))],
        ["memory", f"{machine.get('memory_gib')} GiB"],
        ["load average at start (1/5/15 min)", " / ".join(str(x) for x in load)],
        ["load average at the end", " / ".join(str(x) for x in results.get("load_average_end") or [])],
        ["kernel", str(machine.get("kernel"))],
        ["Python", str(machine.get("python"))],
    ]
    if results.get("parts"):  # each run's load is in the table of runs at the top
        facts = [f for f in facts if not f[0].startswith("load average")]
    facts += [[k, str(v)] for k, v in (results.get("versions") or {}).items()]
    lines += table(["", ""], facts)
    notes = results.get("notes") or []
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"
