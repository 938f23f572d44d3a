"""Static shards on the local control plane: two instances (``--shard a``, ``--shard b``) split 40
resources by label. Each resource is served by exactly one (its helm calls, its release record and
its objects carry the shard), every list and watch the instances send carries the shard, and each
caches only its share. A resource relabelled from a to b moves cleanly: one upgrade by b, none by
a, its Pods untouched; from then on b alone upgrades it and corrects its drift. A PostgreSQLCluster
moved between two scheduled backups goes on with the next slot on its new shard: no slot run
twice, none skipped."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.config.sharding import SHARD_LABEL
from helm_operator.core.naming import OWNER_LABEL
from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import TINY_WATCH
from .operator import OperatorProcess, Resources, eventually, shipped_watches, summed
from .test_day2 import PG, backups, jobs, pg, ts
from .test_diff import Diff

TINY = "tinies.test.helm-operator.io"
PER_SHARD = 20
OPERATOR_AGENTS = ("kopf/", "OpenAPI-Generator/")  # the operator's two clients (kopf, kubernetes)


@pytest.fixture(scope="module")
def sharded_ns() -> str:
    return f"shards-{os.urandom(3).hex()}"


@pytest.fixture(scope="module")
def shards(
    cluster: DevCluster,
    crds: None,
    sharded_ns: str,
    tools: Toolchain,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, OperatorProcess]]:
    """Two instances of the operator (helm v4), one per shard, watching the same namespaces (the
    first deleted while they still run: they uninstall its releases), with the Tiny test kind and
    the PostgreSQLCluster sample (its day-2 hooks)."""
    tools.require("helm")
    cluster.kubectl("create", "namespace", sharded_ns)
    postgres = [w for w in shipped_watches() if w["kind"] == "PostgreSQLCluster"]
    found = {}
    for shard in ("a", "b"):
        workdir = tmp_path_factory.mktemp(f"shard-{shard}")
        watches = workdir / "watches.yaml"
        watches.write_text(yaml.safe_dump([TINY_WATCH, *postgres]))
        args = ["--retry-base", "1", "--retry-cap", "4", "--shard", shard]
        namespaces = [sharded_ns, f"{sharded_ns}-day2"]
        found[shard] = OperatorProcess(cluster, tools.helm, workdir, watches, namespaces, extra_args=args)
        found[shard].start()
    yield found
    for ns in (sharded_ns, f"{sharded_ns}-day2"):
        cluster.kubectl("delete", "namespace", ns, "--wait=true", timeout=240, check=False)
    for op in found.values():
        op.stop()


def tiny(name: str, shard: str | None, replicas: int = 1) -> dict[str, Any]:
    labels = {SHARD_LABEL: shard} if shard else {}
    return {
        "apiVersion": "test.helm-operator.io/v1",
        "kind": "Tiny",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": replicas},
    }


def upgrades(op: OperatorProcess) -> list[str]:
    """The releases the instance ran ``helm upgrade`` for, one entry per helm process."""
    return [m.group(1) for line in op.helm_calls() if (m := re.match(r"upgrade (\S+) ", line))]


def deletions(op: OperatorProcess, ns: str) -> list[str]:
    """The resources whose deletion the instance finished (its delete handler or its sweep of a
    terminating namespace: both may log one that kopf saw deleted while the sweep held it)."""
    done = re.findall(rf"\[Tiny {ns}/(\S+)\] Deletion is processed", op.log())
    done += re.findall(rf"{ns}/(\S+) in terminating namespace", op.log())
    return sorted(set(done))


def failed_deletions(op: OperatorProcess, ns: str) -> set[str]:
    """The resources whose deletion the instance said failed (kopf's handler, or its sweep of a
    terminating namespace): each is tried again."""
    log = op.log()
    failed = re.findall(rf"\[Tiny {ns}/(\S+)\] Handler '[^']*/delete' failed", log)
    failed += re.findall(rf"cannot finish deleting {ns}/(\S+):", log)
    return set(failed)


def uninstalls(op: OperatorProcess) -> list[str]:
    """The releases the instance ran ``helm uninstall`` for, one entry per helm process."""
    return [m.group(1) for line in op.helm_calls() if (m := re.match(r"uninstall (\S+)", line))]


def runs(op: OperatorProcess) -> float:
    """Scheduled backups the instance finished (its metrics)."""
    return summed(op.metrics_port, "helm_operator_day2_runs_total", "schedule/backup")


def cached(op: OperatorProcess, kind: str) -> float:
    """Objects of ``kind`` in the instance's dependent-watch cache (its metrics)."""
    return summed(op.metrics_port, "helm_operator_dependent_cache_objects", kind)


def selectors(cluster: DevCluster, ns: str | None, resource: str) -> set[str]:
    """The labelSelector of every list and watch of ``resource`` in ``ns`` (None: cluster-wide) by
    an operator (but the reads of one release's records)."""
    found = set()
    for record in cluster.audited():
        ref: Any = record.get("objectRef") or {}
        if ref.get("resource") != resource or ref.get("namespace") != ns:
            continue
        if not str(record.get("userAgent") or "").startswith(OPERATOR_AGENTS):
            continue
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(str(record["requestURI"])).query)
        selector = (query.get("labelSelector") or [""])[0]
        if not selector.startswith("owner=helm,name="):  # one release's storage, read by its name
            found.add(selector)
    return found


def release_secrets(cluster: DevCluster, ns: str, shard: str) -> dict[str, int]:
    """Release name -> newest revision among Helm's records labelled for ``shard``."""
    out = cluster.kubectl("get", "secrets", "-n", ns, "-l", f"owner=helm,{SHARD_LABEL}={shard}", "-o", "json")
    found: dict[str, int] = {}
    for item in json.loads(out.stdout)["items"]:
        labels = item["metadata"]["labels"]
        found[labels["name"]] = max(found.get(labels["name"], 0), int(labels["version"]))
    return found


def test_two_static_shards_each_serve_their_own_half_and_a_relabelled_one_moves_cleanly(
    shards: dict[str, OperatorProcess], cluster: DevCluster, sharded_ns: str, tools: Toolchain, tmp_path: Path
) -> None:
    ns, res = sharded_ns, Resources(cluster, sharded_ns)
    names = {s: [f"{s}-{i:02d}" for i in range(PER_SHARD)] for s in ("a", "b")}
    docs = [tiny(n, s) for s in ("a", "b") for n in names[s]] + [tiny("nobody", None)]
    manifest = tmp_path / "tinies.yaml"
    manifest.write_text(
        yaml.safe_dump_all([{**d, "metadata": {**d["metadata"], "namespace": ns}} for d in docs])
    )
    cluster.kubectl("apply", "-f", str(manifest), timeout=120)
    for shard in ("a", "b"):
        cluster.kubectl(
            "wait",
            TINY,
            "-n",
            ns,
            "-l",
            f"{SHARD_LABEL}={shard}",
            "--for=condition=Ready",
            "--timeout=300s",
            timeout=320,
        )

    # Each resource was installed by exactly its shard's instance (once: one revision each, below;
    # a helm call retried after a failure is one more process, not one more revision).
    for shard in ("a", "b"):
        assert set(upgrades(shards[shard])) == set(names[shard]), (shard, upgrades(shards[shard]))
    # Neither serves a resource without the label (an --unsharded instance would).
    nobody = res.get(TINY, "nobody") or {}
    assert not nobody.get("status") and not nobody["metadata"].get("finalizers"), nobody
    assert not res.exists("deployment", "nobody")

    # The release records and the objects carry the shard (what the instances' watches select).
    for shard in ("a", "b"):
        assert release_secrets(cluster, ns, shard) == {n: 1 for n in names[shard]}
    deployment = res.get("deployment", "a-00") or {}
    assert deployment["metadata"]["labels"][SHARD_LABEL] == "a"
    assert SHARD_LABEL not in deployment["spec"]["template"]["metadata"]["labels"]

    # Every list and watch the instances sent in the namespace was limited to one shard, on the
    # API server (the custom resources, Helm's release records)...
    expected = {
        "tinies": {f"{SHARD_LABEL} in ({s})" for s in "ab"},
        "secrets": {f"owner=helm,{OWNER_LABEL},{SHARD_LABEL}={s}" for s in "ab"},
    }
    for resource, wanted in expected.items():
        seen = eventually(
            lambda r=resource, w=wanted: (s := selectors(cluster, ns, r)) >= w and s,  # type: ignore[misc]
            timeout=30,
            what=f"the shards' {resource} watches",
        )
        assert seen == wanted, (resource, seen)
    # ...and so were the dependent watches (cluster-wide, beside other tests' operators' own)...
    cluster_wide = selectors(cluster, None, "deployments")
    assert {f"{OWNER_LABEL},{SHARD_LABEL}={s}" for s in "ab"} <= cluster_wide, cluster_wide
    # ...and each caches only its share of the 40 Deployments.
    for shard in ("a", "b"):
        assert cached(shards[shard], "Deployment") == PER_SHARD

    # `helm-operator diff` of a sharded resource as applied: nothing would change (the release is
    # compared as the shard's instance made it, shard label included).
    out = Diff(cluster, tools.helm, shards["a"].watches, tmp_path)([tiny("a-03", "a")], ns)
    assert out.returncode == 0 and "Summary: no changes (1 resource up to date)" in out.stdout, out

    # Relabel one resource to b: b upgrades it once (moving its labels), a does nothing more.
    before = {s: len(upgrades(shards[s])) for s in "ab"}
    generation = deployment["metadata"]["generation"]
    cluster.kubectl("label", TINY, "a-07", "-n", ns, f"{SHARD_LABEL}=b", "--overwrite")
    eventually(
        lambda: release_secrets(cluster, ns, "b").get("a-07") == 2, timeout=120, what="b's upgrade of a-07"
    )
    res.wait_condition(TINY, "a-07", "Ready", timeout=60)
    moved = res.get("deployment", "a-07") or {}
    assert moved["metadata"]["labels"][SHARD_LABEL] == "b"
    assert moved["metadata"]["generation"] == generation  # the Pods were not rolled
    eventually(
        lambda: "a-07 left this instance's selector" in shards["a"].log(), timeout=30, what="a lets go"
    )
    eventually(lambda: cached(shards["b"], "Deployment") == PER_SHARD + 1, timeout=30, what="b caches it")
    eventually(lambda: cached(shards["a"], "Deployment") == PER_SHARD - 1, timeout=30, what="a drops it")
    assert set(upgrades(shards["b"])[before["b"] :]) == {"a-07"}  # its revision 2, above
    assert len(upgrades(shards["a"])) == before["a"]

    # From now on b alone acts for it: a spec change and a drift correction.
    res.apply(tiny("a-07", "b", replicas=2))
    eventually(
        lambda: ((res.get("deployment", "a-07") or {}).get("spec") or {}).get("replicas") == 2,
        timeout=120,
        what="b's upgrade of the new spec",
    )
    # Its upgrade done (it waits for readiness): a ConfigMap deleted under a running upgrade fails
    # Helm's wait, and the retry is a second upgrade.
    res.wait_condition(TINY, "a-07", "Ready", timeout=120)
    cluster.kubectl("delete", "configmap", "a-07-config", "-n", ns)
    eventually(
        lambda: res.exists("configmap", "a-07-config"), timeout=120, what="b recreates the deleted ConfigMap"
    )
    res.wait_condition(TINY, "a-07", "Ready", timeout=60)
    assert set(upgrades(shards["b"])[before["b"] :]) == {"a-07"}
    assert len(upgrades(shards["a"])) == before["a"]
    # One revision for the spec change; the drift was corrected without one.
    assert release_secrets(cluster, ns, "b")["a-07"] == 3

    # The namespace deleted: each instance finishes the deletion of its own resources (the moved
    # one by b), and only those.
    cluster.kubectl("delete", "namespace", ns, "--wait=true", timeout=240)
    finished = {"a": sorted(set(names["a"]) - {"a-07"}), "b": sorted([*names["b"], "a-07"])}
    for shard in ("a", "b"):
        seen = deletions(shards[shard], ns)
        assert seen == finished[shard], (shard, seen, shards[shard].log()[-3000:])
        # Helm uninstalls by its own instance only (none when the namespace controller deleted the
        # release record first), one per release unless the instance said the first one failed: a
        # helm that times out on a loaded machine is tried again, never run twice for nothing.
        done = uninstalls(shards[shard])
        assert set(done) <= set(finished[shard]), (shard, done)
        repeated = {r for r in done if done.count(r) > 1}
        failed = failed_deletions(shards[shard], ns)
        assert repeated <= failed, (shard, done, failed, shards[shard].log()[-3000:])


def test_a_resource_moved_between_two_scheduled_runs_neither_repeats_nor_skips_a_slot(
    shards: dict[str, OperatorProcess], cluster: DevCluster, sharded_ns: str
) -> None:
    ns = f"{sharded_ns}-day2"
    cluster.kubectl("create", "namespace", ns)
    res, name = Resources(cluster, ns), "moved"

    def labelled(shard: str) -> dict[str, Any]:
        body = pg(name, backup={"schedule": "* * * * *", "maxBackups": 5})
        return {**body, "metadata": {**body["metadata"], "labels": {SHARD_LABEL: shard}}}

    res.apply(labelled("a"))
    res.wait_condition(PG, name, "Ready", timeout=180)
    seen: list[str] = []

    def next_run() -> str | None:
        new = [b for b in backups(res, name) if b not in seen]
        return new[0] if new else None

    seen.append(eventually(next_run, timeout=130, what="the first scheduled backup (shard a)"))
    statefulset = res.get("statefulset", name) or {}
    owner = statefulset["metadata"]["labels"][OWNER_LABEL]

    def pods_watched() -> dict[str, float] | None:
        """The Pods each instance's watch hooks watch, when they are the owner's on its shard alone
        (no shard label reaches pod templates: a shard names the owners it holds)."""
        out = cluster.kubectl("get", "pods", "-n", ns, "-l", f"{OWNER_LABEL}={owner}", "-o", "name")
        count = len(out.stdout.split())
        held = {
            s: summed(op.metrics_port, "helm_operator_hook_watch_objects", "Pod.") for s, op in shards.items()
        }
        return held if count and sorted(held.values()) == [0, count] else None

    assert eventually(pods_watched, timeout=30, what="a watching the Pods")["a"] > 0
    cluster.kubectl("label", PG, name, "-n", ns, f"{SHARD_LABEL}=b", "--overwrite")
    eventually(
        lambda: f"{name} left this instance's selector" in shards["a"].log(), timeout=60, what="a lets go"
    )
    for _ in range(2):
        seen.append(
            eventually(next_run, timeout=130, what=f"the scheduled backup after {seen[-1]} (shard b)")
        )

    assert eventually(pods_watched, timeout=30, what="b watching the Pods, a none")["b"] > 0
    # One slot a minute, none twice and none skipped, across the move.
    slots = [dt.datetime.strptime(b.rsplit("-", 1)[1], "%Y%m%d%H%M").replace(tzinfo=dt.UTC) for b in seen]
    assert [s - slots[0] for s in slots] == [dt.timedelta(minutes=i) for i in range(3)], seen
    started = [e["message"] for e in res.events(name) if e["reason"] == "BackupStarted"]
    for b in seen:
        assert sum(b in m for m in started) == 1, (b, started)
        assert b in jobs(res), b
    # The first run was a's, the later two b's (each instance counts the runs it finished).
    assert {s: runs(shards[s]) for s in "ab"} == {"a": 1, "b": 2}
    state = ((res.get(PG, name) or {}).get("status") or {})["day2"]["schedules"]["backup"]
    assert ts(state["lastScheduleTime"]) == slots[-1], state
    # The move upgraded the release's labels, not its Pods.
    moved = res.get("statefulset", name) or {}
    assert moved["metadata"]["labels"][SHARD_LABEL] == "b"
    assert moved["metadata"]["generation"] == statefulset["metadata"]["generation"]
