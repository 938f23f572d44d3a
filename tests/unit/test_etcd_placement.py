"""EtcdCluster's day-2 Jobs run where its members run, and prune with an image the spec may name."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from typing import Any

from helm_operator.hooks.loader import load
from helm_operator.hooks.testing import Harness

ROOT = Path(__file__).resolve().parents[2]
TOLERATE = {"key": "pool", "operator": "Exists", "effect": "NoSchedule"}
OLDER = {"key": "old", "operator": "Exists"}
ZONE = {
    "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
    }
}


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("etcdcluster_hooks", ROOT / "hooks/etcdcluster.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _resource(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": "EtcdCluster",
        "metadata": {"name": "etcd", "namespace": "prod", "uid": "9a9a9a9a-3333"},
        "spec": {"size": 3, "version": "3.6.16", **spec},
    }


def test_placement_is_the_charts_top_level_keys_over_the_pod_ones() -> None:
    placement = _module().placement
    assert placement({}) == {}
    top = {"nodeSelector": {"pool": "db"}, "tolerations": [TOLERATE], "affinity": {"nodeAffinity": ZONE}}
    assert placement(top) == top
    older = {"pod": {"nodeSelector": {"pool": "old", "disk": "ssd"}, "tolerations": [OLDER, TOLERATE]}}
    assert placement(older) == {
        "nodeSelector": {"pool": "old", "disk": "ssd"},
        "tolerations": [OLDER, TOLERATE],
    }
    both = placement({**top, **older})
    assert both["nodeSelector"] == {"pool": "db", "disk": "ssd"}  # the top-level key wins
    assert both["tolerations"] == [OLDER, TOLERATE]  # both apply, once each
    # Pod (anti-)affinity is about the members themselves, not about a Job.
    spread: dict[str, Any] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    assert placement({"affinity": spread}) == {}
    assert placement({"pod": {"affinity": {"nodeAffinity": ZONE, **spread}}}) == {
        "affinity": {"nodeAffinity": ZONE}
    }


def _pods(h: Harness) -> dict[str, dict[str, Any]]:
    """Each Job's Pod spec by role (backup, prune, restore)."""
    out: dict[str, dict[str, Any]] = {}
    for key, obj in h.kube.objects.items():
        if key[1] == "Job":
            out[obj["metadata"]["labels"]["helm-operator.io/day2-role"]] = obj["spec"]["template"]["spec"]
    return out


def test_snapshot_prune_and_restore_jobs_run_where_the_members_run() -> None:
    backup = {"backupIntervalInSecond": 30, "maxBackups": 1, "toolsImage": "mirror.local/busybox:1.37"}
    claim = {"resources": {"requests": {"storage": "1Gi"}}}
    for placed in (
        {"nodeSelector": {"pool": "db"}, "tolerations": [TOLERATE]},
        {
            "pod": {
                "nodeSelector": {"pool": "db"},
                "tolerations": [TOLERATE],
                "persistentVolumeClaimSpec": claim,
            }
        },
    ):
        spec = {"pod": {"persistentVolumeClaimSpec": claim}, **placed, "backup": backup}
        h = Harness(load("hooks/etcdcluster.py", ROOT), _resource(**spec))
        for run in ("etcd-snapshot-20261122100000", "etcd-snapshot-20261122100030"):
            assert asyncio.run(h.run("schedule", name="snapshot", run_as=run)).ok
        restore = Harness(
            load("hooks/etcdcluster.py", ROOT),
            _resource(**spec, restore={"fromBackup": "pvc://etcd-backups/etcd-snapshot-1.db"}),
        )
        assert asyncio.run(restore.run("before", stage="install")).ok
        pods = {**_pods(h), **_pods(restore)}
        assert sorted(pods) == ["backup", "prune", "restore"], placed
        for role, pod in pods.items():
            assert pod["nodeSelector"] == {"pool": "db"} and pod["tolerations"] == [TOLERATE], (role, placed)
        assert pods["prune"]["containers"][0]["image"] == "mirror.local/busybox:1.37"


def test_the_prune_image_defaults_to_busybox_and_is_checked() -> None:
    h = Harness(
        load("hooks/etcdcluster.py", ROOT), _resource(backup={"backupIntervalInSecond": 30, "maxBackups": 1})
    )
    for run in ("etcd-snapshot-20261122100000", "etcd-snapshot-20261122100030"):
        assert asyncio.run(h.run("schedule", name="snapshot", run_as=run)).ok
    assert _pods(h)["prune"]["containers"][0]["image"] == "busybox:1.37"
    bad = _resource(backup={"toolsImage": "busybox;rm -rf /"})
    result = asyncio.run(Harness(load("hooks/etcdcluster.py", ROOT), bad).run("validate")).result
    assert result.permanent and "spec.backup.toolsImage: " in result.message, result


def test_etcdctl_is_told_the_v3_api_only_where_it_defaults_to_v2() -> None:
    def snapshot_env(version: str) -> list[dict[str, str]]:
        spec = {"version": version, "backup": {"backupIntervalInSecond": 30}}
        h = Harness(load("hooks/etcdcluster.py", ROOT), _resource(**spec))
        assert asyncio.run(h.run("schedule", name="snapshot", run_as="etcd-snapshot-1")).ok
        return list(_pods(h)["backup"]["containers"][0].get("env") or [])

    assert snapshot_env("3.3.27") == [{"name": "ETCDCTL_API", "value": "3"}]
    assert snapshot_env("3.5.17") == snapshot_env("3.6.16") == []  # 3.6 logs it as unrecognized
