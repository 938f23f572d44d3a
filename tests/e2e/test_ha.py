"""Two replicas with leader election on the real control plane: exactly one acts, the other takes
over when the leader dies (once the lease has run out) or at its next try when the leader stops
and releases the lease, and a leader that was frozen while the other took over does nothing once
it resumes: its helm processes' writes pass the lease's gate in the operator (its relay)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import yaml

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import TINY_WATCH, Helm, releases, tiny
from .operator import OperatorProcess, Resources, eventually, free_port, probe
from .pace import lease_timings, within

TINIES = "tinies.test.helm-operator.io"
# Seconds, scaled to the machine's load (tests/e2e/pace.py). The retry period is how often a
# standby tries.
LEASE, RENEW, RETRY = lease_timings()


def replica(
    cluster: DevCluster,
    tools: Toolchain,
    workdir: Path,
    watches: Path,
    ns: str,
    kubeconfig: Path | None = None,
) -> OperatorProcess:
    workdir.mkdir(exist_ok=True)
    port = free_port()
    op = OperatorProcess(
        cluster,
        tools.helm,
        workdir,
        watches,
        [ns],
        kubeconfig=kubeconfig,
        extra_args=[
            *("--retry-base", "1", "--retry-cap", "4"),
            "--leader-elect",
            *("--leader-election-namespace", ns, "--leader-election-id", "ha-test"),
            *("--leader-election-lease-duration", str(LEASE)),
            *("--leader-election-renew-deadline", str(RENEW)),
            *("--leader-election-retry-period", str(RETRY)),
            *("--health-probe-bind-address", f"127.0.0.1:{port}"),
        ],
        started="leader election: candidate",
    )
    op.probe_port = port  # type: ignore[attr-defined]
    return op


def role(op: OperatorProcess) -> str:
    try:
        return str(probe(op.probe_port, "/readyz")[1]["role"])  # type: ignore[attr-defined]
    except OSError:
        return "down"


def lease_time(cluster: DevCluster, namespace: str, field: str) -> float:
    lease = json.loads(cluster.kubectl("get", "lease", "ha-test", "-n", namespace, "-o", "json").stdout)
    return dt.datetime.fromisoformat(lease["spec"][field].replace("Z", "+00:00")).timestamp()


def upgrades(op: OperatorProcess) -> list[str]:
    return [c for c in op.helm_calls() if c.startswith("upgrade")]


def resumed(op: OperatorProcess, namespace: str, *names: str) -> bool:
    """Whether the process's kopf has run the resume handler of each of ``names``."""
    lines = op.log().splitlines()
    return all(any(f"[Tiny {namespace}/{n}]" in x and "resume' succeeded" in x for x in lines) for n in names)


def logged_at(op: OperatorProcess, phrase: str) -> float:
    """When the process logged ``phrase`` (its first line saying it), from the line's timestamp."""
    line = next(x for x in op.log().splitlines() if phrase in x)
    return datetime.strptime(" ".join(line.split()[:2]), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_one_leader_acts_and_a_standby_takes_over(
    cluster: DevCluster, crds: None, tools: Toolchain, e2e_watches: Path, solo_namespace: str, tmp_path: Path
) -> None:
    namespace = solo_namespace  # its own operator: no shared operator watches s-*
    res = Resources(cluster, namespace)
    helm = Helm(tools.helm, cluster, tmp_path / "client")
    a = replica(cluster, tools, tmp_path / "a", e2e_watches, namespace)
    b = replica(cluster, tools, tmp_path / "b", e2e_watches, namespace)
    try:
        a.start()
        eventually(lambda: role(a) == "leader", 30, "a leads")
        b.start()
        eventually(lambda: role(b) == "standby", 30, "b stands by")
        assert probe(b.probe_port, "/readyz")[0] == 200  # type: ignore[attr-defined]  # able to take over
        lease = json.loads(cluster.kubectl("get", "lease", "ha-test", "-n", namespace, "-o", "json").stdout)
        assert lease["spec"]["leaseDurationSeconds"] == LEASE

        res.apply(tiny("first", message="one"))
        res.wait_condition(TINIES, "first", "Ready")
        time.sleep(2 * RETRY)  # a standby that acted would have done so by now
        # The leader installed it (a retry after a failed helm call is one more upgrade, not
        # another revision); the standby started no helm at all.
        assert {c.split()[1] for c in upgrades(a)} == {"first"}, a.helm_calls()
        assert b.helm_calls() == [], b.helm_calls()
        assert "Handler" not in b.log()  # kopf never started on the standby

        # The leader dies as a Pod on a lost node would: no chance to hand the lease over.
        a.stop(signal.SIGKILL, group=True)
        killed = time.monotonic()
        last_renewal = lease_time(cluster, namespace, "renewTime")
        res.apply(tiny("second", message="two"))
        eventually(lambda: role(b) == "leader", LEASE + 20, "b takes over", interval=0.1)
        took = time.monotonic() - killed
        # Measured on the Lease itself (the machine's load does not stretch it): the standby
        # acquired it within the lease duration of the dead leader's last renewal, plus its polling.
        # Never before the lease ran out (two leaders); then at the standby's next tries (how soon
        # on a quiet machine is the benchmark's to measure).
        gap = lease_time(cluster, namespace, "acquireTime") - last_renewal
        assert LEASE <= gap <= LEASE + within(2 * RETRY + 3), f"acquired {gap:.1f}s after the last renewal"
        res.wait_condition(TINIES, "second", "Ready")
        eventually(lambda: resumed(b, namespace, "first"), 60, "b resumes first")
        # No reconcile ran twice: b installed only what was new; "first" kept its one revision.
        assert {c.split()[1] for c in upgrades(b)} == {"second"}, upgrades(b)
        revs = {name: r["revision"] for name, r in releases(helm, namespace).items()}
        assert set(revs.values()) == {"1"} and len(revs) == 2, revs

        # A deliberate stop hands the lease over: the standby leads at its next try after the
        # release, not once the lease has run out.
        a.start()
        eventually(lambda: role(a) == "standby", 30, "a stands by again")
        before = len(a.helm_calls())
        stopping = time.monotonic()
        assert b.stop(signal.SIGTERM) == 0
        eventually(lambda: role(a) == "leader", LEASE + 10, "a leads again", interval=0.1)
        stopped = time.monotonic() - stopping
        assert "released Lease" in b.log(), b.log()[-3000:]
        # From the release to the new holder, as each process logged it: the shutdown before the
        # release (kopf's end, on a loaded machine) is not the handover's.
        handover = logged_at(a, f"now holds Lease {namespace}/ha-test") - logged_at(b, "released Lease")
        assert handover < LEASE, f"a took the lease {handover:.1f}s after b released it: it waited it out"
        res.wait_condition(TINIES, "first", "Ready")
        eventually(lambda: resumed(a, namespace, "first", "second"), 60, "a resumes both")
        assert len(a.helm_calls()) == before, a.helm_calls()[before:]  # nothing changed: no helm at all
        print(
            f"takeover {took:.1f}s after SIGKILL ({gap:.1f}s after the last renewal);",
            f"handover {handover:.1f}s after the release ({stopped:.1f}s after SIGTERM)",
        )
    finally:
        a.stop()
        b.stop()


class Recorder:
    """``kubectl proxy`` between one operator and the API server, logging each request as it
    arrives (method and path): everything that operator and its helm processes send, and when."""

    def __init__(self, cluster: DevCluster, tools: Toolchain, workdir: Path) -> None:
        workdir.mkdir(exist_ok=True)
        self.log_path = workdir / "proxy.log"
        self.proc = subprocess.Popen(
            [str(tools.kubectl), "proxy", "--port=0", "-v=6", "--kubeconfig", str(cluster.kubeconfig)],
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
        )
        found = eventually(
            lambda: re.search(r"Starting to serve on 127\.0\.0\.1:(\d+)", self.log_path.read_text()),
            30,
            "kubectl proxy",
        )
        self.kubeconfig = workdir / "kubeconfig"
        server = f"http://127.0.0.1:{found.group(1)}"
        self.kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "proxy", "cluster": {"server": server}}],
                    "users": [{"name": "proxy", "user": {}}],
                    "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}],
                    "current-context": "proxy",
                }
            )
        )

    def mark(self) -> int:
        return self.log_path.stat().st_size

    def writes(self, since: int) -> list[str]:
        """The requests that change something (not GET), received after ``since``."""
        with self.log_path.open("rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
        return re.findall(r"Filter accepting ((?:POST|PUT|PATCH|DELETE) \S+)", text)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def helm_processes(root: int) -> list[int]:
    """The helm processes among the descendants of ``root``."""
    parents, names = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                names[int(entry.name)] = stat[stat.index("(") + 1 : stat.rindex(")")]
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, level = [], {root}
    while level:
        level = {pid for pid, ppid in parents.items() if ppid in level}
        found += [pid for pid in level if names.get(pid) == "helm"]
    return sorted(found)


def history(helm: Helm, namespace: str, name: str) -> list[dict[str, object]]:
    out = helm("history", name, "-n", namespace, "-o", "json").stdout
    return list(json.loads(out))


WAVE = 10  # resources upgraded in the wave the leader is frozen in
SLOTS = 4  # upgrades at once: the operator's default number of helm processes


def test_a_frozen_leader_does_nothing_once_it_resumes(
    cluster: DevCluster, crds: None, tools: Toolchain, solo_namespace: str, tmp_path: Path
) -> None:
    """SIGSTOP the leader's process group (its helm processes with it, as a frozen Pod's cgroup)
    mid-wave; the standby takes over and finishes the wave; SIGCONT: the old leader starts no
    helm process, sends no write (its every request goes through a recording proxy), and every
    release keeps one consistent history.

    SIGCONT wakes helm and the watchdog together: on a busy machine a helm process whose wait
    ended while frozen ran first and wrote its release (two writes seen at a load of 11). The
    test resumes the helm processes first, for two seconds, then the rest: helm reaches the API
    server only through the operator's relay, whose gate refuses once the operator runs."""
    namespace = solo_namespace
    res = Resources(cluster, namespace)
    helm = Helm(tools.helm, cluster, tmp_path / "client")
    # Upgrades in parallel, each allowed to wait long enough to outlast the freeze.
    watches = tmp_path / "watches.yaml"
    watches.write_text(yaml.safe_dump([{**TINY_WATCH, "maxConcurrentReconciles": SLOTS, "timeout": "180s"}]))
    recorder = Recorder(cluster, tools, tmp_path / "a")
    a = replica(cluster, tools, tmp_path / "a", watches, namespace, kubeconfig=recorder.kubeconfig)
    b = replica(cluster, tools, tmp_path / "b", watches, namespace)
    names = [f"w{i}" for i in range(WAVE)]
    node = cluster.kubectl("get", "nodes", "-o", "jsonpath={.items[0].metadata.name}").stdout.strip()
    wave = f"go-{os.urandom(3).hex()}"  # the label value the wave's Pods need: on no node yet
    frozen = False
    try:
        a.start()
        eventually(lambda: role(a) == "leader", 30, "a leads")
        b.start()
        eventually(lambda: role(b) == "standby", 30, "b stands by")
        for name in names:
            res.apply(tiny(name, message="one"))
        for name in names:
            res.wait_condition(TINIES, name, "Ready")

        # The wave: each upgrade waits (helm --wait) for Pods that no node can take yet.
        for name in names:
            res.apply(tiny(name, message="two", nodeSelector={"ha-wave": wave}))

        def waiting() -> bool:
            found = releases(helm, namespace).values()
            return bool(sum(r["status"] == "pending-upgrade" for r in found) == SLOTS)

        eventually(waiting, 60, f"{SLOTS} upgrades waiting for their Pods", interval=0.2)
        assert a.proc is not None
        os.killpg(a.proc.pid, signal.SIGSTOP)  # the operator and its helm processes, as a frozen Pod
        frozen = True
        stopped = time.monotonic()
        cluster.kubectl("label", "node", node, f"ha-wave={wave}")  # the Pods can run now

        eventually(lambda: role(b) == "leader", LEASE + 20, "b takes over", interval=0.2)
        took = time.monotonic() - stopped
        for name in names:
            res.wait_condition(TINIES, name, "Ready", timeout=180)

        def settled() -> bool:  # b is done: every release deployed, and no helm process for a while
            calls = len(b.helm_calls())
            time.sleep(3)
            statuses = {r["status"] for r in releases(helm, namespace).values()}
            return statuses == {"deployed"} and len(b.helm_calls()) == calls

        eventually(settled, 60, "b is done with the wave", interval=0)
        finished = time.monotonic() - stopped

        calls, mark = len(a.helm_calls()), recorder.mark()
        # The wave's helm processes resume first, as a busy node may run them before the
        # operator and its watchdog: one that could reach the API server on its own would write
        # its release now (its wait saw the Pods Ready), before anything could stop it.
        waiting_helm = helm_processes(a.proc.pid)
        assert len(waiting_helm) == SLOTS, waiting_helm
        for pid in waiting_helm:
            os.kill(pid, signal.SIGCONT)
        time.sleep(2)
        os.killpg(a.proc.pid, signal.SIGCONT)
        frozen = False
        woken = time.monotonic()
        eventually(lambda: a.proc is not None and a.proc.poll() is not None, 30, "a exits", interval=0.05)
        exited = time.monotonic() - woken
        time.sleep(3)  # a helm process that escaped would have written by now

        started_after = a.helm_calls()[calls:]
        writes_after = recorder.writes(mark)
        histories = {name: history(helm, namespace, name) for name in names}
        print(
            f"b took over {took:.1f}s after SIGSTOP and finished the wave {finished:.1f}s after it;",
            f"a exited {exited:.2f}s after SIGCONT, having started {len(started_after)} helm",
            f"process(es) and sent {len(writes_after)} write(s) since;",
            "histories:",
            {n: [f"{r['revision']}:{r['status']}" for r in h] for n, h in histories.items()},
            "; its fence:",
            next((x.split("superseded; ", 1)[1] for x in a.log().splitlines() if "superseded; " in x), None),
        )
        assert started_after == [], started_after
        assert writes_after == [], writes_after
        assert "this replica may have been superseded" in a.log(), a.log()[-3000:]
        assert a.stop() == 1  # exits as a leader that cannot renew: its Pod restarts as a standby

        for name, revisions in histories.items():
            deployed = [r["revision"] for r in revisions if r["status"] == "deployed"]
            assert deployed == [revisions[-1]["revision"]], revisions  # one, the latest
            assert not [r for r in revisions if "ollback" in str(r["description"])], revisions
            status = (res.get(TINIES, name) or {})["status"]
            assert status["release"]["revision"] == deployed[0], (name, status["release"], revisions)
            assert status["observedGeneration"] == (res.get(TINIES, name) or {})["metadata"]["generation"]
    finally:
        if a.proc is not None:
            group = a.proc.pid
            if frozen:
                os.killpg(group, signal.SIGCONT)
            a.stop(signal.SIGKILL, group=True)
            with contextlib.suppress(ProcessLookupError):  # helm processes it left behind
                os.killpg(group, signal.SIGKILL)
        b.stop()
        recorder.stop()
        cluster.kubectl("label", "node", node, "ha-wave-", check=False)
