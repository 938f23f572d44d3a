"""How slow this machine is right now, and the one place every upper bound of the e2e suite scales by.

The suite shares two cores with two other suites and the benchmark, so a wait that is generous on
a quiet machine can be short under load. Each pytest process measures a fixed piece of work at its
start (process spawns, the way the suite's kubectl and helm calls cost) against the same work on a
quiet machine (``pace.json``), clamps the ratio to ``[1, MAX_FACTOR]`` and multiplies every upper
bound by it: ``eventually``'s deadline, the operator's start, and every "within N s" through
``within()``. Lower bounds ("not before N s") are never scaled. Numbers the product promises
(failover windows, handover times) are measured by the benchmarks, not by a test's timer.

``HELM_OPERATOR_E2E_SLOWDOWN`` sets the factor by hand (e.g. to reproduce a CI run).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REFERENCE = Path(__file__).with_name("pace.json")
MAX_FACTOR = 4.0
SAMPLES = 9


def probe() -> float:
    """Median seconds of one fixed unit of work: a Python process started and run to its end, and
    a small computation in this one (what the suite's many short-lived clients and the operator's
    own reconciles both pay when the CPUs are shared)."""
    taken = []
    for _ in range(SAMPLES):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-S", "-c", "pass"], check=True)
        sum(i * i for i in range(60_000))
        taken.append(time.perf_counter() - began)
    return statistics.median(taken)


def reference() -> float:
    """The probe's median on a quiet machine of this kind (committed beside this module)."""
    return float(json.loads(REFERENCE.read_text())["probe_seconds"])


def measure() -> tuple[float, float]:
    """(factor, probe seconds): the slowdown against the quiet reference, clamped."""
    forced = os.environ.get("HELM_OPERATOR_E2E_SLOWDOWN")
    seconds = probe()
    if forced:
        return max(1.0, min(MAX_FACTOR, float(forced))), seconds
    return max(1.0, min(MAX_FACTOR, seconds / reference())), seconds


FACTOR = 1.0  # set once per process by the conftest at session start


def set_factor(value: float) -> None:
    global FACTOR
    FACTOR = value


def within(seconds: float) -> float:
    """An upper bound of ``seconds`` on a quiet machine, scaled to this one's load."""
    return seconds * FACTOR


def lease_timings() -> tuple[int, int, int]:
    """Seconds of (lease duration, renew deadline, retry period) for the tests that run leader
    election or shards: Kubernetes' defaults (15, 10, 2), the durations scaled to the load. A leader
    past its renew deadline exits, as it must; on two shared cores a renewal can stall for five
    seconds (three control planes' etcds share one disk), which must not end a healthy leader."""
    return round(within(15)), round(within(10)), 2


if __name__ == "__main__":  # python -m tests.e2e.pace: measure the reference on a quiet machine
    seconds = min(probe() for _ in range(3))
    REFERENCE.write_text(json.dumps({"probe_seconds": round(seconds, 4)}) + "\n")
    print(f"reference probe: {seconds:.4f}s (load {os.getloadavg()[0]:.2f}) -> {REFERENCE}")
