"""Where our operator's own CPU goes: py-spy samples of the operator process during a run.

``--profile`` attaches ``py-spy record`` (non-blocking: the operator is never paused) to every
start of our operator and writes its collapsed stacks next to the contender's logs; the report
then sums them by package and by function. Only the thread holding the GIL is sampled, so the
shares are of the CPU the operator spends running Python; helm and the post-renderer's
short-lived client are separate processes.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

RATE = 50  # samples per second
TOP = 15
GROUPS = {
    "helm_operator": "helm-operator (ours)",
    "kopf": "kopf",
    "kubernetes": "kubernetes client",
    "urllib3": "HTTP (urllib3, ssl, socket)",
    "ssl": "HTTP (urllib3, ssl, socket)",
    "socket": "HTTP (urllib3, ssl, socket)",
    "http": "HTTP (urllib3, ssl, socket)",
    "aiohttp": "kopf's HTTP (aiohttp)",
    "asyncio": "asyncio",
    "yaml": "YAML",
    "json": "JSON",
    "deepdiff": "deepdiff",
    "jsonschema": "jsonschema",
    "pyhelm3": "pyhelm3",
    "prometheus_client": "prometheus_client",
    "logging": "logging",
    "threading": "threads",
    "concurrent": "threads",
    "queue": "threads",
}


def py_spy() -> str:
    found = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if found is None:
        raise RuntimeError("--profile needs py-spy: pip install py-spy (it is in the test extras)")
    return found


def record(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """Start sampling ``pid`` until :func:`finish`."""
    cmd = [py_spy(), "record", "--pid", str(pid), "--rate", str(RATE), "--format", "raw"]
    # --gil: only the thread holding the GIL is sampled, so a sample is CPU spent in Python, not a
    # thread waiting for its turn (on 2 cores, 8 reconciles and the post-render server contend).
    cmd += ["--output", str(out), "--nonblocking", "--gil"]
    with out.with_suffix(".log").open("wb") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen[bytes]) -> None:
    """Stop sampling; py-spy writes its file on SIGINT."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# Innermost frames of a thread that waits rather than runs (py-spy cannot always tell from the
# outside): left out, and their share reported apart.
WAITS = (
    "select (selectors.py)",
    "wait (threading.py)",
    "_worker (concurrent/futures/thread.py)",
    "read (ssl.py)",
    "recv_into (ssl.py)",
    "do_poll (urllib3/util/wait.py)",
    "do_handshake (ssl.py)",
    "sleep",
)
ROOTS = ("helm_operator/cli/", "App.run (helm_operator/runtime/app.py)")  # every sample's outer frames


def _waiting(function: str) -> bool:
    return any(function.endswith(w) or function.startswith(w) for w in WAITS)


def _frames(line: str) -> tuple[list[str], int]:
    """A collapsed stack; no frames for a line that does not parse (a file cut short)."""
    stack, _, count = line.rstrip("\n").rpartition(" ")
    return (stack.split(";"), int(count)) if stack and count.isdigit() else ([], 0)


def _function(frame: str) -> str:
    """``name (file.py:12)`` → ``name (file.py)``: lines of one function count together."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})" if where else name


def _group(frame: str) -> str:
    where = frame.partition(" (")[2]
    top = where.split("/", 1)[0].split(".", 1)[0] if where else ""
    return GROUPS.get(top, "other")


def summarize(paths: Iterable[Path]) -> dict[str, Any]:
    """Samples by package of the running (innermost) frame, the functions most often running, and
    our own functions by the samples spent in them or anything they called."""
    total = waiting = 0
    by_group: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    ours: Counter[str] = Counter()
    files = 0
    for path in paths:
        files += 1
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            frames, count = _frames(line)
            if not frames:
                continue
            if _waiting(_function(frames[-1])):
                waiting += count
                continue
            total += count
            by_group[_group(frames[-1])] += count
            leaves[_function(frames[-1])] += count
            for fn in {_function(f) for f in frames if "(helm_operator/" in f}:
                if not any(r in fn for r in ROOTS):
                    ours[fn] += count
    return {
        "rate": RATE,
        "files": files,
        "samples": total,
        "waiting_samples": waiting,
        "cpu_seconds": total / RATE,
        "by_package": by_group.most_common(),
        "top_running": leaves.most_common(TOP),
        "ours_inclusive": ours.most_common(TOP),
    }


def render(summary: dict[str, Any]) -> list[str]:
    """The report's profile section (Markdown lines)."""
    total = summary["samples"] or 1
    out = [
        "## Profile of our operator",
        "",
        f"py-spy sampled the thread of our operator process holding the GIL at {summary['rate']} Hz over "
        f"{summary['files']} start(s) of this run: {summary['samples']} samples running Python code "
        f"(~{summary['cpu_seconds']:.0f} s); "
        f"{summary.get('waiting_samples', 0)} more found a thread waiting (in select, a socket read, a "
        "condition) and are left out. Helm and the post-renderer script are other processes. The "
        "sampler's own CPU competes with the contenders: read timings of a profiled run with care.",
        "",
        "| package of the running frame | share |",
        "|---|---|",
    ]
    out += [f"| {group} | {100 * n / total:.1f} % |" for group, n in summary["by_package"]]
    out += ["", "| function running (innermost frame) | share |", "|---|---|"]
    out += [f"| `{fn}` | {100 * n / total:.1f} % |" for fn, n in summary["top_running"]]
    out += ["", "| our function (with all it calls) | share |", "|---|---|"]
    out += [f"| `{fn}` | {100 * n / total:.1f} % |" for fn, n in summary["ours_inclusive"]]
    return out
