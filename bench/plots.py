"""PNG plots from the results JSON (matplotlib, Agg backend: no display needed, as in CI).

Three figures: releases deployed over time (convergence and update wave, one panel per N), the
drift-latency distribution per operator, and CPU over time while idle.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # the backend must be chosen first

from bench.report import TITLES, contenders_of, drift_latencies, first_with, ns_of, runs_for

COLORS = {"ours": "tab:blue", "helm": "tab:gray", "helm-lean": "tab:green", "sdk": "tab:orange"}


def _deployed_over_time(results: dict[str, Any], path: Path) -> None:
    ns = ns_of(results)
    fig, axes = plt.subplots(len(ns), 2, figsize=(11, 3.2 * len(ns)), squeeze=False)
    for row, n in enumerate(ns):
        for col, scenario in enumerate(("convergence", "update")):
            ax = axes[row][col]
            for c in contenders_of(results):
                runs = runs_for(results, c, n)
                if not runs or not runs[0].get(scenario):
                    continue
                data = runs[0][scenario]
                timeline = data["timeline"]
                ax.step([t for t, _ in timeline], [d for _, d in timeline], where="post",
                        label=TITLES.get(c, c), color=COLORS.get(c))  # fmt: skip
                if data.get("reported_s") is not None:  # every CR says so: the operators' finish line
                    ax.plot([data["reported_s"]], [n], marker="x", color=COLORS.get(c), markersize=9)
            ax.set_title(f"{'Convergence' if col == 0 else 'Update wave'}, N={n} (x: all CRs report it)")
            ax.set_xlabel("seconds since the first write")
            ax.set_ylabel("releases deployed")
            ax.set_ylim(0, n * 1.05)
            ax.grid(alpha=0.3)
            ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _n_style(rank: int) -> str:
    """Line style telling the N apart where colours tell the contenders: the largest N solid."""
    return ["-", "--", ":", "-."][rank % 4]


def _drift_distribution(results: dict[str, Any], path: Path) -> bool:
    series = []
    for i, n in enumerate(sorted(ns_of(results), reverse=True)):
        for c in contenders_of(results):
            drift = first_with(results, c, n, "drift")
            if drift:
                lat = drift_latencies(drift)
                series.append((f"{TITLES.get(c, c)} N={n}", c, _n_style(i), lat, drift["timeout_s"]))
    if not series:
        return False
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for label, c, style, lat, timeout in series:
        done = sorted(x for x in lat if not math.isinf(x))
        missed = len(lat) - len(done)
        ys = [(i + 1) / len(lat) for i in range(len(done))]
        tag = f"{label} ({missed} not corrected within {timeout:g} s)" if missed else label
        ax.step(done, ys, style, where="post", label=tag, color=COLORS.get(c))
    ax.set_xscale("log")
    ax.set_xlabel("seconds from the manual change to its correction (log scale)")
    ax.set_ylabel("fraction of changes corrected")
    ax.set_ylim(0, 1.02)
    ax.axvline(0.5, color="tab:green", linestyle=":", linewidth=1, label="target p50 0.5 s")
    ax.axvline(2.0, color="tab:red", linestyle=":", linewidth=1, label="target p95 2 s")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8)
    ax.set_title("Drift-correction latency (cumulative distribution)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _idle_cpu(results: dict[str, Any], path: Path) -> bool:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    drawn = False
    for i, n in enumerate(sorted(ns_of(results), reverse=True)):
        for c in contenders_of(results):
            idle = first_with(results, c, n, "idle")
            pts = [(t, p) for t, p, _ in (idle or {}).get("samples", []) if p is not None]
            if pts:
                style = _n_style(i)
                ax.plot([t for t, _ in pts], [p for _, p in pts], style, marker=".",
                        label=f"{TITLES.get(c, c)} N={n}", color=COLORS.get(c))  # fmt: skip
                drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.axhline(1.0, color="tab:red", linestyle=":", linewidth=1, label="target < 1 %")
    ax.set_xlabel("seconds into the idle window")
    ax.set_ylabel("CPU, % of one core (log above 0.1)")
    ax.set_yscale("symlog", linthresh=0.1)  # an operator at 0.3 % and one at 175 % on one plot
    ax.set_ylim(0, ax.get_ylim()[1] * 2)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("CPU while idle (process tree, sampled)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def draw(results: dict[str, Any], out_dir: Path) -> dict[str, str]:
    """Write the PNGs into ``out_dir``; return title → file name for the report."""
    out_dir.mkdir(parents=True, exist_ok=True)
    made = {}
    if results.get("runs"):
        _deployed_over_time(results, out_dir / "deployed-over-time.png")
        made["Releases deployed over time"] = "deployed-over-time.png"
    if _drift_distribution(results, out_dir / "drift-latency.png"):
        made["Drift-correction latency"] = "drift-latency.png"
    if _idle_cpu(results, out_dir / "idle-cpu.png"):
        made["CPU while idle"] = "idle-cpu.png"
    return made
