"""Two replicas with leader election on the real control plane: exactly one acts, the other takes
over when the leader dies (within the lease duration) or hands over at once when it stops."""

from __future__ import annotations

import datetime as dt
import json
import signal
import time
from pathlib import Path

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import Helm, releases, tiny
from .operator import OperatorProcess, Resources, eventually, free_port, probe

TINIES = "tinies.test.helm-operator.io"
LEASE, RENEW, RETRY = 6, 4, 1  # seconds: short, so the test waits little


def replica(cluster: DevCluster, tools: Toolchain, workdir: Path, watches: Path, ns: str) -> OperatorProcess:
    workdir.mkdir()
    port = free_port()
    op = OperatorProcess(
        cluster,
        tools.helm,
        workdir,
        watches,
        [ns],
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
        assert len(upgrades(a)) == 1 and b.helm_calls() == [], (a.helm_calls(), b.helm_calls())
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
        gap = lease_time(cluster, namespace, "acquireTime") - last_renewal
        assert LEASE <= gap <= LEASE + 2 * RETRY + 1, f"acquired {gap:.1f}s after the last renewal"
        res.wait_condition(TINIES, "second", "Ready")
        time.sleep(2)  # the resume of "first" has run: it must not have started helm
        # No reconcile ran twice: b installed only what was new; "first" kept its one revision.
        assert [c.split()[1] for c in upgrades(b)] == ["second"], upgrades(b)
        revs = {name: r["revision"] for name, r in releases(helm, namespace).items()}
        assert set(revs.values()) == {"1"} and len(revs) == 2, revs

        # A deliberate stop hands the lease over: the standby leads after one retry, not a lease.
        a.start()
        eventually(lambda: role(a) == "standby", 30, "a stands by again")
        before = len(a.helm_calls())
        stopping = time.monotonic()
        assert b.stop(signal.SIGTERM) == 0
        eventually(lambda: role(a) == "leader", LEASE + 10, "a leads again", interval=0.1)
        handover = time.monotonic() - stopping
        assert "released Lease" in b.log_path.read_text()
        assert handover < LEASE, f"handover took {handover:.1f}s: the lease was not released"
        res.wait_condition(TINIES, "first", "Ready")
        time.sleep(2)
        assert len(a.helm_calls()) == before, a.helm_calls()[before:]  # nothing changed: no helm at all
        print(
            f"takeover {took:.1f}s after SIGKILL ({gap:.1f}s after the last renewal);",
            f"handover {handover:.1f}s",
        )
    finally:
        a.stop()
        b.stop()
