"""Side-by-side benchmark: this operator vs plain ``helm`` (the floor) vs the Operator SDK's Helm
operator (the peer), on one local control plane, in one run, reported as ratios.

    python -m bench --quick                  # N=20, short windows: a few minutes (CI smoke test)
    python -m bench                          # full: N=100,500,1000, 3 repetitions (a quiet machine!)
    python -m bench --n 100 --contenders ours,helm --kubeconfig ~/.cache/helm-operator/clusters/x/kubeconfig
    python -m bench --render bench/results/<run>.json --out bench   # re-render REPORT.md and plots
                                        # (with <run>.analysis.md, if present, as "Reading of this run")
    python -m bench --n 1000 --repetitions 1       # full mode one N at a time (all N take over 3 h
    python -m bench --render bench/results/<n100+500>.json bench/results/<n1000>.json --out bench
                                        # on 2 cores), merged into one report: same commit and settings
    python -m bench --n 200 --contenders ours --profile   # where our operator's CPU goes (py-spy)

Full mode (N=100,500,1000) writes bench/REPORT.md, bench/plots/*.png and bench/results/<date>.json;
quick mode writes to .work/bench-quick/, other N to .work/bench-<date>/ (both ignored by git), unless
--out says otherwise. Exit status 1 when a contender fails to start or to converge (the report is
still written, marked as failed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import signal
import sys
from pathlib import Path

from bench import merge, plots, report
from bench.contenders import CONTENDERS
from bench.progress import Progress
from bench.run import Plan, Runner
from bench.scenarios import Settings
from helm_operator.dev.tools import REPO_ROOT

BENCH_DIR = Path(__file__).resolve().parent
QUICK_OUT = REPO_ROOT / ".work" / "bench-quick"


def _ints(text: str) -> list[int]:
    try:
        values = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("N must be at least 1")
    return values


def _contenders(text: str) -> list[str]:
    keys = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [k for k in keys if k not in CONTENDERS]
    if unknown or not keys:
        raise argparse.ArgumentTypeError(
            f"unknown contender(s) {unknown}; choose from {','.join(CONTENDERS)}"
        )
    return list(dict.fromkeys(keys))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="N=20, idle 30 s, 10 drift changes: a smoke test")
    p.add_argument("--n", type=_ints, help="N values, comma-separated (default 100,500,1000; quick 20)")
    p.add_argument("--concurrency", type=int, default=8, help="C: parallel releases for every contender")
    p.add_argument(
        "--repetitions", type=int, help="convergence/update repetitions per N (default 3; quick 1)"
    )
    p.add_argument(
        "--contenders", type=_contenders, default=list(CONTENDERS), help="subset of ours,helm,helm-lean,sdk"
    )
    p.add_argument("--kubeconfig", type=Path, help="use this running cluster instead of starting one")
    p.add_argument("--out", type=Path, help="where REPORT.md, plots/ and the JSON go")
    p.add_argument("--idle", type=float, help="idle window in seconds (default 300; quick 30)")
    p.add_argument("--drift-changes", type=int, help="manual changes per operator (default 100; quick 10)")
    p.add_argument(
        "--drift-timeout", type=float, help="seconds before a change counts as not corrected (60; quick 20)"
    )
    p.add_argument(
        "--drift-budget",
        type=float,
        help="seconds of drift changes per operator and N; then no more are made (600; quick 120)",
    )
    p.add_argument(
        "--timeout", type=float, help="seconds a wave may take before the run fails (default 300 + 3 s x N)"
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="sample our operator with py-spy; the report says where its CPU goes",
    )
    p.add_argument(
        "--render",
        type=Path,
        nargs="+",
        metavar="RESULTS_JSON",
        help="only render a report from results files (several: runs of different N, merged)",
    )
    return p


FULL_NS = [100, 500, 1000]


def outputs(out: Path | None, mode: str, stamp: str) -> tuple[Path, Path]:
    """(report directory, results JSON path). Only a full run replaces the committed report."""
    if out:
        return out, out / "results.json"
    if mode == "full":
        return BENCH_DIR, BENCH_DIR / "results" / f"bench-{stamp}.json"
    scratch = QUICK_OUT if mode == "quick" else REPO_ROOT / ".work" / f"bench-{stamp}"
    return scratch, scratch / "results.json"


def write_report(results: dict[str, object], out: Path) -> Path:
    made = plots.draw(results, out / "plots")
    path = out / "REPORT.md"
    path.write_text(report.render(results, {title: f"plots/{name}" for title, name in made.items()}))
    return path


def _interrupt(signum: int, _frame: object) -> None:
    """SIGTERM (a CI timeout) unwinds like Ctrl-C: operators stopped, namespaces and an own
    cluster removed, the partial report written."""
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, _interrupt)
    args = parser().parse_args(argv)
    if args.render:
        try:
            results = merge.merge([json.loads(path.read_text()) for path in args.render], FULL_NS)
        except merge.MergeError as exc:
            print(f"python -m bench --render: {exc}", file=sys.stderr)
            return 2
        # Written by hand after reading a run: <run>.analysis.md, one per run.
        found = [path.with_suffix(".analysis.md") for path in args.render]
        readings = [a.read_text().strip() for a in found if a.exists()]
        if readings:
            results["analysis"] = "\n\n".join(readings)
        print(write_report(results, args.out or args.render[0].parent))
        return 0
    if args.profile:
        from bench import profile

        try:
            profile.py_spy()  # fails now, not after the cluster is up
        except RuntimeError as exc:
            print(f"python -m bench: {exc}", file=sys.stderr)
            return 2
    quick = args.quick
    ns = args.n or ([20] if quick else FULL_NS)
    mode = "quick" if quick else ("full" if ns == FULL_NS else "custom")
    settings = Settings(
        concurrency=args.concurrency,
        converge_timeout=args.timeout or 300 + 3 * max(ns),
        drift_changes=args.drift_changes if args.drift_changes is not None else (10 if quick else 100),
        drift_timeout=args.drift_timeout or (20 if quick else 60),
        drift_budget=args.drift_budget or (120 if quick else 600),
        idle_seconds=args.idle or (30 if quick else 300),
        sample_every=5,
        settle_seconds=5 if quick else 30,
        quiesce_max=10 if quick else 120,
    )
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out, results_path = outputs(args.out, mode, stamp)
    plan = Plan(
        ns=ns,
        repetitions=args.repetitions or (1 if quick else 3),
        contenders=args.contenders,
        settings=settings,
        kubeconfig=args.kubeconfig,
        workdir=REPO_ROOT / ".work" / "bench" / stamp,
        results_path=results_path,
        command=shlex.join(["python", "-m", "bench", *argv]),
        mode=mode,
        profile=args.profile,
    )
    progress = Progress()
    who = ",".join(plan.contenders)
    progress.say(f"bench: N={ns}, C={settings.concurrency}, contenders {who}; logs in {plan.workdir}")
    runner = Runner(plan, progress)
    failed = None
    try:
        runner.run()
    except KeyboardInterrupt:
        failed = "interrupted"
    except Exception as exc:
        failed = f"{type(exc).__name__}: {exc}"
    path = write_report(runner.results, out)
    progress.say(f"report: {path}; results: {results_path}")
    if failed:
        progress.say(f"bench FAILED: {failed}")
        return 1
    sys.stdout.write(Path(path).read_text().split("\n## Convergence")[0] + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
