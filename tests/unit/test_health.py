from __future__ import annotations

from typing import Any

from helm_operator.release.health import assess, why_unready


def obj(kind: str, spec: dict[str, Any], status: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": "x", "generation": generation}, "spec": spec, "status": status}


def test_deployments_statefulsets_daemonsets() -> None:
    ok = {"observedGeneration": 1, "updatedReplicas": 3, "availableReplicas": 3}
    assert why_unready(obj("Deployment", {"replicas": 3}, ok)) is None
    assert why_unready(obj("Deployment", {"replicas": 3}, {**ok, "availableReplicas": 1})) == (
        "1/3 replicas available, 3 updated"
    )
    assert why_unready(obj("Deployment", {"replicas": 3}, ok, generation=2)) == (
        "its controller has not seen the latest spec"
    )
    sts = {"observedGeneration": 1, "readyReplicas": 2, "currentRevision": "a", "updateRevision": "a"}
    assert why_unready(obj("StatefulSet", {"replicas": 2}, sts)) is None
    assert why_unready(obj("StatefulSet", {"replicas": 2}, {**sts, "updateRevision": "b"})) == (
        "rolling out a new revision"
    )
    # OnDelete: the controller never moves currentRevision nor restarts anyone; ready members count.
    on_delete = {"replicas": 2, "updateStrategy": {"type": "OnDelete"}}
    assert why_unready(obj("StatefulSet", on_delete, {**sts, "updateRevision": "b"})) is None
    assert why_unready(obj("StatefulSet", on_delete, {**sts, "readyReplicas": 1})) == "1/2 replicas ready"
    ds = {"observedGeneration": 1, "desiredNumberScheduled": 2, "numberReady": 1, "updatedNumberScheduled": 2}
    assert why_unready(obj("DaemonSet", {}, ds)) == "1/2 Pods ready, 2 updated"


def test_jobs_volumes_and_other_kinds() -> None:
    done = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert why_unready(obj("Job", {}, done)) is None
    assert why_unready(obj("Job", {}, {})) == "not complete"
    assert why_unready(obj("Job", {}, {"conditions": [{"type": "Failed", "status": "True"}]})) == "failed"
    assert why_unready(obj("PersistentVolumeClaim", {}, {"phase": "Pending"})) == "Pending, not Bound"
    assert why_unready(obj("ConfigMap", {}, {})) is None


def test_assess_names_every_unready_object() -> None:
    health = assess([obj("Job", {}, {}), None, obj("ConfigMap", {}, {})])
    assert not health.ready and health.message() == "not ready: Job/x: not complete"
    assert assess([]).ready and assess([]).message() == "all workloads are ready"
