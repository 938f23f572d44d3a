"""Dynamic shards with the real controller-sharding sharder: three instances join a ControllerRing
(a Lease each), the sharder assigns 30 resources among them, and each is served by exactly one.
One instance killed: its resources are assigned to the others and served again. One instance
added: the sharder drains some resources from the others (they hand them back), assigns them to it,
and nothing is installed or upgraded twice — every change made around the moves lands once."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from helm_operator.config.sharding import Ring
from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.sharder import Sharder
from helm_operator.dev.tools import Toolchain

from .conftest import TINY_WATCH
from .operator import OperatorProcess, eventually, free_port, metrics, summed
from .pace import lease_timings

TINY = "tinies.test.helm-operator.io"
# A ring of its own per run: the sharder knows a shard by its Lease's name alone, in any namespace,
# so the dead shards of an earlier run (same names, another namespace) must not be in this ring.
RING = f"tinies-{os.urandom(3).hex()}"
COUNT = 30
# Each shard's Lease, scaled to the machine's load (tests/e2e/pace.py): a shard starved past its
# renew deadline exits, as it must, and its share moves.
LEASE_SECONDS, RENEW_SECONDS, RETRY_SECONDS = lease_timings()
LEASE = ["--leader-election-lease-duration", str(LEASE_SECONDS)]
LEASE += ["--leader-election-renew-deadline", str(RENEW_SECONDS)]
LEASE += ["--leader-election-retry-period", str(RETRY_SECONDS)]


@pytest.fixture(scope="module")
def ring_ns(cluster: DevCluster, crds: None) -> Iterator[str]:
    ns = f"ring-{os.urandom(3).hex()}"
    cluster.kubectl("create", "namespace", ns)
    yield ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture(scope="module")
def sharder(
    cluster: DevCluster, ring_ns: str, tools: Toolchain, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sharder]:
    """The sharder, its webhook on loopback, and a ControllerRing of the Tiny kind in ``ring_ns``."""
    running = Sharder(tmp_path_factory.mktemp("sharder"), cluster.kubeconfig, tools, free_port()).start()
    controlled = [{"group": "apps", "resource": "deployments"}, {"group": "", "resource": "configmaps"}]
    tinies = {"group": "test.helm-operator.io", "resource": "tinies", "controlledResources": controlled}
    running.apply_ring(RING, [tinies], namespace=ring_ns)
    yield running
    running.stop()
    cluster.kubectl("delete", "controllerring", RING, check=False)


class Shards:
    """Operator instances, each one shard of the ring (its name is its Lease's)."""

    def __init__(self, cluster: DevCluster, tools: Toolchain, ns: str, base: Path) -> None:
        self.cluster, self.tools, self.ns, self.base = cluster, tools, ns, base
        self.watches = base / "watches.yaml"
        self.watches.write_text(yaml.safe_dump([TINY_WATCH]))
        self.running: dict[str, OperatorProcess] = {}
        self.gone: dict[str, OperatorProcess] = {}

    def add(self, name: str) -> OperatorProcess:
        workdir = self.base / name
        workdir.mkdir()
        args = ["--retry-base", "1", "--retry-cap", "4", "--controller-ring", RING, "--shard-name", name]
        args += ["--leader-election-namespace", self.ns, *LEASE]
        op = OperatorProcess(self.cluster, self.tools.helm, workdir, self.watches, [self.ns], extra_args=args)
        op.start()
        self.running[name] = op
        return op

    def kill(self, name: str) -> None:
        op = self.running.pop(name)
        op.stop(signal.SIGKILL, group=True)
        self.gone[name] = op

    def all(self) -> dict[str, OperatorProcess]:
        return {**self.gone, **self.running}

    def stop(self) -> None:
        for op in self.running.values():
            op.stop()


@pytest.fixture
def shards(
    cluster: DevCluster, ring_ns: str, sharder: Sharder, tools: Toolchain, tmp_path: Path
) -> Iterator[Shards]:
    tools.require("helm")
    group = Shards(cluster, tools, ring_ns, tmp_path)
    yield group
    # Deleted while instances still serve them: their finalizers are removed.
    cluster.kubectl("delete", TINY, "--all", "-n", ring_ns, "--wait=true", timeout=240, check=False)
    group.stop()


def upgrades(op: OperatorProcess) -> list[str]:
    return [m.group(1) for line in op.helm_calls() if (m := re.match(r"upgrade (\S+) ", line))]


def assignment(cluster: DevCluster, ns: str) -> dict[str, str]:
    """Resource name -> the shard the sharder assigned it to (absent: none now)."""
    out = cluster.kubectl("get", TINY, "-n", ns, "-o", "json")
    label = Ring(RING, "x").shard_label
    return {
        i["metadata"]["name"]: i["metadata"]["labels"][label]
        for i in json.loads(out.stdout)["items"]
        if label in (i["metadata"].get("labels") or {})
    }


def misplaced(cluster: DevCluster, ns: str, shards: Shards) -> list[str]:
    """What breaks "every resource's Deployment and ConfigMap are on its shard (the sharder keys
    them by their controller reference), each shard's dependent watches hold its own only, and its
    watch of Helm's release Secrets (which no shard label reaches) names its own releases only"."""
    owners = assignment(cluster, ns)
    label = Ring(RING, "x").shard_label
    wrong = []
    for kind, suffix in (("deployments", ""), ("configmaps", "-config")):
        items = json.loads(cluster.kubectl("get", kind, "-n", ns, "-o", "json").stdout)["items"]
        for i in items:
            owner = i["metadata"]["name"].removesuffix(suffix)
            shard = (i["metadata"].get("labels") or {}).get(label)
            if owner in owners and shard != owners[owner]:
                wrong.append(f"{kind} {i['metadata']['name']} on {shard}, its resource on {owners[owner]}")
    for shard, op in shards.running.items():
        share = sum(1 for s in owners.values() if s == shard)
        held = summed(op.metrics_port, "helm_operator_dependent_cache_objects", "Deployment.apps")
        if held != share:
            wrong.append(f"{shard} watches {held:g} Deployments, its share is {share}")
        releases = metrics(op.metrics_port).get("helm_operator_release_index_releases")
        if releases != share:
            wrong.append(f"{shard} watches the Secrets of {releases} releases, its share is {share}")
    return wrong


def corrected(op: OperatorProcess) -> float:
    """Objects the instance re-asserted because they drifted (its metrics)."""
    return summed(op.metrics_port, "helm_operator_drift_corrections_total")


def revisions(cluster: DevCluster, ns: str) -> dict[str, int]:
    """Release name -> its newest revision among Helm's records: what each change made, however
    many helm processes it took (a retry after a failed call is one more process)."""
    out = cluster.kubectl("get", "secrets", "-n", ns, "-l", "owner=helm", "-o", "json")
    found: dict[str, int] = {}
    for item in json.loads(out.stdout)["items"]:
        labels = item["metadata"]["labels"]
        found[labels["name"]] = max(found.get(labels["name"], 0), int(labels["version"]))
    return found


def dependents_settle(cluster: DevCluster, ns: str, shards: Shards, timeout: float = 30) -> None:
    wrong: list[str] = []

    def settled() -> bool:
        wrong[:] = misplaced(cluster, ns, shards)
        return not wrong

    try:
        eventually(settled, timeout, "every dependent on its resource's shard, watched by it alone")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; still: {wrong}") from None


def drains_asked(sharder: Sharder) -> Counter[str]:
    """How often the sharder asked a shard to drain each resource (by name)."""
    return Counter(
        m.group(1)
        for line in sharder.log().splitlines()
        if '"Draining object from shard"' in line
        for m in [re.search(r'"object":\{"name":"([^"]+)"', line)]
        if m
    )


def replicas(cluster: DevCluster, ns: str) -> dict[str, int]:
    out = cluster.kubectl("get", "deployments", "-n", ns, "-o", "json")
    return {i["metadata"]["name"]: i["spec"]["replicas"] for i in json.loads(out.stdout)["items"]}


def set_replicas(cluster: DevCluster, ns: str, names: list[str], count: int) -> None:
    for name in names:
        cluster.kubectl(
            "patch", TINY, name, "-n", ns, "--type=merge", "-p", json.dumps({"spec": {"replicas": count}})
        )


def test_the_sharder_spreads_resources_a_dead_shards_move_and_a_new_shard_takes_its_share_once(
    shards: Shards, cluster: DevCluster, ring_ns: str, sharder: Sharder
) -> None:
    ns = ring_ns
    for name in ("shard-0", "shard-1", "shard-2"):
        shards.add(name)
    names = [f"t-{i:02d}" for i in range(COUNT)]
    docs = [
        {
            "apiVersion": "test.helm-operator.io/v1",
            "kind": "Tiny",
            "metadata": {"name": n, "namespace": ns},
            "spec": {"replicas": 1},
        }
        for n in names
    ]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs), timeout=120)
    cluster.kubectl("wait", TINY, "--all", "-n", ns, "--for=condition=Ready", "--timeout=300s", timeout=320)

    # Each resource was assigned to one shard, and installed by that shard alone, once: one
    # revision each (a helm call retried after a failure is one more process, not a revision).
    assigned = assignment(cluster, ns)
    assert sorted(assigned) == names, assigned
    assert set(assigned.values()) == {"shard-0", "shard-1", "shard-2"}, Counter(assigned.values())
    for shard, op in shards.running.items():
        assert set(upgrades(op)) == {n for n, s in assigned.items() if s == shard}, (shard, upgrades(op))
    assert revisions(cluster, ns) == dict.fromkeys(names, 1)
    dependents_settle(cluster, ns, shards)
    leases = json.loads(cluster.kubectl("get", "leases", "-n", ns, "-o", "json").stdout)["items"]
    ring_leases = {
        lease["metadata"]["name"]: lease["spec"].get("holderIdentity")
        for lease in leases
        if (lease["metadata"].get("labels") or {}).get(Ring.LEASE_LABEL) == RING
    }
    assert ring_leases == {s: s for s in ("shard-0", "shard-1", "shard-2")}, ring_leases

    # One shard dies (SIGKILL: no Lease released). A change to its resources made at once lands when
    # the sharder has assigned them to the others: each once.
    victim = "shard-1"
    orphans = sorted(n for n, s in assigned.items() if s == victim)
    before = {s: len(upgrades(op)) for s, op in shards.all().items()}
    shards.kill(victim)
    killed = time.monotonic()
    set_replicas(cluster, ns, orphans, 2)
    eventually(
        lambda: all(assignment(cluster, ns).get(n) not in (None, victim) for n in orphans),
        timeout=60,
        what="the dead shard's resources assigned to the others",
    )
    reassigned = time.monotonic() - killed
    eventually(
        lambda: all(replicas(cluster, ns).get(n) == 2 for n in orphans),
        timeout=120,
        what="the dead shard's resources upgraded by the others",
    )
    served_again = time.monotonic() - killed
    moved = assignment(cluster, ns)
    assert all(moved[n] in ("shard-0", "shard-2") for n in orphans), moved
    # Each orphan upgraded by the shard it moved to, and by no other; one new revision each.
    after = {s: upgrades(op)[before[s] :] for s, op in shards.running.items()}
    for shard, done in after.items():
        assert set(done) == {n for n in orphans if moved[n] == shard}, (shard, after)
    assert revisions(cluster, ns) == {n: 2 if n in orphans else 1 for n in names}
    print(
        f"a dead shard's {len(orphans)} resources: reassigned {reassigned:.1f}s and served again "
        f"{served_again:.1f}s after the kill (lease duration {LEASE_SECONDS}s)"
    )

    # A new shard joins: the sharder drains a share of the resources from the others and assigns it
    # to the new one. Moving upgrades nothing; a change to every resource then lands once, by its
    # current shard.
    before = {s: len(upgrades(op)) for s, op in shards.all().items()}
    shards.add("shard-3")
    eventually(
        lambda: "shard-3" in assignment(cluster, ns).values() and len(assignment(cluster, ns)) == COUNT,
        timeout=120,
        what="resources assigned to the new shard",
    )
    time.sleep(3)  # let any (wrong) action a move would cause show
    assert {s: upgrades(op)[before.get(s, 0) :] for s, op in shards.running.items()} == {
        s: [] for s in shards.running
    }
    # Every resource the sharder asked to drain (its debug log says so; it asks again when its
    # patch raced the shard's acknowledgement) was handed back by the shard that held it, and no
    # more often than it was asked; the new shard got its share through them.
    asked = eventually(lambda: drains_asked(sharder), timeout=10, what="drains")
    acknowledged = Counter(
        m.group(1)
        for op in shards.running.values()
        for m in re.finditer(r"Tiny \S+/(\S+) drained: handed back", op.log())
    )
    final = assignment(cluster, ns)
    assert set(acknowledged) == set(asked) and all(acknowledged[n] <= asked[n] for n in asked), (
        acknowledged,
        asked,
        Counter(final.values()),
    )
    revised = revisions(cluster, ns)
    set_replicas(cluster, ns, names, 3)
    eventually(
        lambda: (
            all(v == 3 for k, v in replicas(cluster, ns).items() if k in names)
            and len(replicas(cluster, ns)) == COUNT
        ),
        timeout=180,
        what="every resource upgraded",
    )
    final = assignment(cluster, ns)
    for shard, op in shards.running.items():
        done = upgrades(op)[before.get(shard, 0) :]
        assert set(done) == {n for n, s in final.items() if s == shard}, (shard, done)
    assert revisions(cluster, ns) == {n: revised[n] + 1 for n in names}  # one revision per change
    dependents_settle(cluster, ns, shards)  # moved with their resources, watched by the new shard only

    # Drift of a moved resource is the new shard's to correct (and no one else's): its ConfigMap
    # deleted by hand is back, labelled for that shard again, with no Helm action.
    moved = sorted(n for n, s in final.items() if s == "shard-3")[0]
    actions = {s: len(op.helm_calls()) for s, op in shards.running.items()}
    corrections = {s: corrected(op) for s, op in shards.running.items()}
    cluster.kubectl("delete", "configmap", f"{moved}-config", "-n", ns)
    eventually(
        lambda: cluster.kubectl("get", "configmap", f"{moved}-config", "-n", ns, check=False).returncode == 0,
        timeout=60,
        what=f"shard-3 recreates {moved}'s ConfigMap",
    )
    dependents_settle(cluster, ns, shards)
    assert {s: len(op.helm_calls()) for s, op in shards.running.items()} == actions
    # Corrected by shard-3 (once, or again if its first write failed), by no other shard.
    now = {s: corrected(op) - corrections[s] for s, op in shards.running.items()}
    assert now["shard-3"] >= 1 and all(n == 0 for s, n in now.items() if s != "shard-3"), now
    assert sharder.proc is not None and sharder.proc.poll() is None, sharder.log()[-2000:]
