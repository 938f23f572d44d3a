"""The scenarios, each a function of one contender at one N that returns plain JSON-able data.

Clocks are the bench's monotonic clock; "deployed" is read from Helm's release Secrets (whoever
wrote them), "reported" from the custom resources' status. Every wait has a deadline and fails
with the contender's log tail, so a contender that does not converge stops the run loudly.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from bench import workload
from bench.cluster import BenchCluster
from bench.contenders import Contender, ContenderFailed
from bench.measure import Sampler, grown, helm_subcommands, rss_mib, running_named

DRIFT_POLL = 0.05


def poll_interval(n: int) -> float:
    """How often a wave polls: every 0.25 s for small N, up to once a second at N=1000, so the
    bench's own lists (N release Secrets' metadata, N custom resources) stay a small load on the API
    server it shares with the contender, while the resolution stays well below the wave's time."""
    return min(1.0, max(0.25, n / 1000))


@dataclass(frozen=True)
class Settings:
    concurrency: int
    converge_timeout: float
    drift_changes: int
    drift_timeout: float
    idle_seconds: float
    sample_every: float
    settle_seconds: float
    quiesce_max: float
    drift_give_up: int = 10  # consecutive uncorrected changes after which the rest are not made
    drift_budget: float = 600.0  # seconds after which no further change is made (a slow corrector)


@dataclass
class Target:
    """One contender at one N: what the scenarios act on."""

    cluster: BenchCluster
    contender: Contender
    names: list[str]
    settings: Settings

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def ns(self) -> str:
        return self.contender.namespace

    def fail(self, what: str) -> ContenderFailed:
        log = self.contender.log_tail()
        return ContenderFailed(
            f"{self.contender.key} at N={self.n}: {what}" + (f"\n--- log tail ---\n{log}" if log else "")
        )

    def alive(self) -> None:
        if self.contender.operator and self.contender.pid() is None:
            raise self.fail("the operator process exited")


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def wave(t: Target, wave_no: int) -> dict[str, Any]:
    """Convergence (wave 1: N installs) or an update wave (2+: one value changed in all N): time
    until every release has the wave's revision deployed and, for operators, every CR says so."""
    c, want = t.contender, set(t.names)
    cpu0, own0, log0 = c.cpu_seconds(), c.own_cpu_seconds(), c.helm_log()
    t0 = time.monotonic()
    submission = c.submit(t.names, wave_no)
    deadline = t0 + t.settings.converge_timeout
    timeline: list[list[float]] = []
    parallel: list[int] = []  # helm processes running at each poll, until all are deployed
    deployed_s = reported_s = ready_s = None
    cpu1, own1, log1 = None, None, None
    ready = c.ready(t.names, wave_no) is not None  # also wait for (and time) Ready
    while True:
        now = time.monotonic()
        if now > deadline:
            done = timeline[-1][1] if timeline else 0
            raise t.fail(
                f"wave {wave_no} not converged in {t.settings.converge_timeout:.0f}s "
                f"({done:.0f}/{t.n} releases deployed, reported={reported_s is not None})"
            )
        if submission.errors:
            submission.check()
        t.alive()
        if deployed_s is None:
            if (parent := c.helm_parent()) is not None:
                parallel.append(running_named(parent, "helm"))
            records = t.cluster.release_records(t.ns)
            done = len(workload.deployed_at_least(records, wave_no) & want)
            timeline.append([round(now - t0, 3), done])
            if done == t.n and submission.done():
                deployed_s = now - t0
        if (
            deployed_s is not None
            and reported_s is None
            and c.operator
            and c.reported(t.names, wave_no) == t.n
        ):
            reported_s = time.monotonic() - t0
        if reported_s is not None and ready and c.ready(t.names, wave_no) == t.n:
            ready_s = time.monotonic() - t0
        settled = reported_s is not None and (ready_s is not None or not ready)
        if deployed_s is not None and (not c.operator or settled):
            cpu1, own1, log1 = c.cpu_seconds(), c.own_cpu_seconds(), c.helm_log()
            break
        time.sleep(poll_interval(t.n))
    submission.join()
    submission.check()
    records = t.cluster.release_records(t.ns)
    revisions = workload.latest_revision(records)
    per_release = [revisions.get(name, 0) for name in t.names]
    started = None if log0 is None or log1 is None else log1[len(log0) :]
    calls = None if started is None else len(started)
    return {
        "wave": wave_no,
        "seconds": reported_s if reported_s is not None else deployed_s,
        "deployed_s": deployed_s,
        "reported_s": reported_s,
        "ready_s": ready_s,
        "submitted_s": (submission.finished_at or t0) - t0,
        "cpu_s": _delta(cpu1, cpu0),
        "own_cpu_s": _delta(own1, own0),  # the operator process alone, helm children excluded
        "helm_calls": calls,
        "helm_calls_per_release": calls / t.n if calls is not None else None,
        "helm_subcommands": helm_subcommands(started) if started is not None else None,
        "helm_parallel_max": max(parallel) if parallel else None,
        "helm_parallel_mean": statistics.fmean(parallel) if parallel else None,
        "revisions_min": min(per_release),
        "revisions_max": max(per_release),
        "releases_with_other_revision_count": sum(1 for r in per_release if r != wave_no),
        "timeline": timeline,
    }


def quiesce(t: Target, busy_pct: float = 5.0, quiet_windows: int = 2) -> float:
    """Wait until the contender's process tree has used less than ``busy_pct`` of a core for
    ``quiet_windows`` consecutive seconds (at most ``quiesce_max``), so that trailing work of one
    scenario (status writes, follow-up reconciles) is not billed to the next. Returns the wait."""
    t0 = time.monotonic()
    if t.contender.pid() is None:
        return 0.0
    quiet = 0
    last = t.contender.cpu_seconds()
    while quiet < quiet_windows and time.monotonic() - t0 < t.settings.quiesce_max:
        time.sleep(1.0)
        now = t.contender.cpu_seconds()
        if now is None or last is None:
            break
        quiet = quiet + 1 if 100 * (now - last) < busy_pct else 0
        last = now
    return time.monotonic() - t0


# -- drift ------------------------------------------------------------------------------------
def _poll_until(check: Callable[[], bool], timeout: float) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if check():
            return time.monotonic() - t0
        time.sleep(DRIFT_POLL)
    return None


def _missing(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def drift_change(t: Target, kind: str, name: str, i: int) -> float | None:
    """Make one manual change and time until the object is back as the chart renders it (None: not
    corrected within the timeout). The clock starts when the API server accepted the change."""
    core, apps, ns, limit = t.cluster.core, t.cluster.apps, t.ns, t.settings.drift_timeout
    if kind == "configmap-edited":
        want = core.read_namespaced_config_map(name, ns).data
        core.patch_namespaced_config_map(name, ns, {"data": {"PODINFO_UI_MESSAGE": f"edited by hand {i}"}})
        return _poll_until(lambda: core.read_namespaced_config_map(name, ns).data == want, limit)
    if kind == "deployment-scaled":
        replicas = apps.read_namespaced_deployment(name, ns).spec.replicas
        apps.patch_namespaced_deployment_scale(name, ns, {"spec": {"replicas": replicas + 2}})
        return _poll_until(lambda: apps.read_namespaced_deployment(name, ns).spec.replicas == replicas, limit)
    if kind == "service-deleted":
        uid = core.read_namespaced_service(name, ns).metadata.uid
        core.delete_namespaced_service(name, ns)

        def recreated() -> bool:
            svc = _missing(lambda: core.read_namespaced_service(name, ns))
            return svc is not None and svc.metadata.uid != uid

        return _poll_until(recreated, limit)
    raise ValueError(f"unknown drift kind {kind!r}")


def drift(t: Target) -> dict[str, Any]:
    """Manual changes one at a time, round-robin over the kinds and spread over the releases."""
    changes: list[dict[str, Any]] = []
    stride = 7 if t.n % 7 else 1  # visits every release before repeating one
    missed, deadline = 0, time.monotonic() + t.settings.drift_budget
    stopped = ""
    for i in range(t.settings.drift_changes):
        if missed >= t.settings.drift_give_up:
            stopped = f"given up after {missed} in a row"  # would take changes x timeout
            break
        if time.monotonic() > deadline:
            stopped = f"the {t.settings.drift_budget:g} s budget was spent"  # one that waits for a resync
            break
        kind = workload.DRIFT_KINDS[i % len(workload.DRIFT_KINDS)]
        name = t.names[(i * stride) % t.n]
        t.alive()
        latency = drift_change(t, kind, name, i)
        changes.append({"kind": kind, "release": name, "latency_s": latency})
        missed = missed + 1 if latency is None else 0
        time.sleep(0.2)  # changes must not overlap
    skipped = t.settings.drift_changes - len(changes)
    give_up = t.settings.drift_give_up
    return {
        "timeout_s": t.settings.drift_timeout,
        "changes": changes,
        "skipped": skipped,
        "give_up": give_up,
        "stopped": stopped,
    }


# -- idle, footprint, restart -----------------------------------------------------------------
def idle(t: Target) -> dict[str, Any]:
    """N unchanged releases for a while: CPU, helm processes, API requests (whole server: the
    contender runs alone, the floor's idle window is the background), in two halves."""
    c, s = t.contender, t.settings
    time.sleep(s.settle_seconds)
    t.alive()
    calls0, reconciles0 = c.helm_calls(), c.reconciles()
    cpu0 = c.cpu_seconds() if c.operator else None  # the floor has no process while idle
    sampler = Sampler(c.pid(), s.sample_every).start()
    by0 = t.cluster.requests()
    t0 = time.monotonic()
    time.sleep(s.idle_seconds / 2)
    by_mid = t.cluster.requests()
    time.sleep(s.idle_seconds / 2)
    by1 = t.cluster.requests()
    req0, req_mid, req1 = sum(by0.values()), sum(by_mid.values()), sum(by1.values())
    wall = time.monotonic() - t0
    sampler.stop()
    t.alive()
    cpu = _delta(c.cpu_seconds(), cpu0) if c.operator else None
    half = wall / 2
    pct = [(ts, p) for ts, p, _ in sampler.samples if p is not None]
    first = [p for ts, p in pct if ts <= half]
    second = [p for ts, p in pct if ts > half]
    return {
        "seconds": wall,
        "cpu_s": cpu,
        "cpu_pct": 100 * cpu / wall if cpu is not None else None,
        "cpu_pct_first_half": statistics.fmean(first) if first else None,
        "cpu_pct_second_half": statistics.fmean(second) if second else None,
        "helm_calls": _delta(c.helm_calls(), calls0),
        "reconciles": _delta(c.reconciles(), reconciles0),
        "requests_first_half": req_mid - req0,
        "requests_second_half": req1 - req_mid,
        "requests_by": grown(by0, by_mid, by1),
        "samples": [list(x) for x in sampler.samples],
    }


def background(cluster: BenchCluster, seconds: float) -> dict[str, Any]:
    """The API server's request count with no contender at all: the background to subtract when
    the floor (whose idle window serves that purpose) is not among the contenders."""
    req0 = cluster.request_total()
    t0 = time.monotonic()
    time.sleep(seconds / 2)
    req_mid = cluster.request_total()
    time.sleep(seconds / 2)
    req1 = cluster.request_total()
    return {
        "seconds": time.monotonic() - t0,
        "requests_first_half": req_mid - req0,
        "requests_second_half": req1 - req_mid,
    }


def footprint(t: Target, idle_samples: list[list[Any]]) -> dict[str, Any] | None:
    """RSS of the operator process alone (for ours: Python, without its helm children)."""
    pid = t.contender.pid()
    if pid is None:
        return None
    rss, hwm = rss_mib(pid)
    steady = [r for _, _, r in idle_samples if r is not None]
    return {
        "rss_peak_mib": hwm,
        "rss_steady_mib": statistics.median(steady) if steady else rss,
        "rss_end_mib": rss,
    }


def restart(t: Target) -> dict[str, Any]:
    """Restart the operator with N unchanged CRs: time until every CR was handled again, and the
    helm processes it started meanwhile (plus a settle period for stragglers)."""
    c = t.contender
    c.stop()
    calls0 = c.helm_calls()
    t0 = time.monotonic()
    c.start()
    deadline = t0 + t.settings.converge_timeout
    while not c.resumed(t.names):
        t.alive()
        if time.monotonic() > deadline:
            raise t.fail(f"not resumed {t.settings.converge_timeout:.0f}s after a restart")
        time.sleep(0.1)
    took = time.monotonic() - t0
    time.sleep(t.settings.settle_seconds)
    return {"seconds": took, "helm_calls": _delta(c.helm_calls(), calls0), "reconciles": c.reconciles()}
