from __future__ import annotations

from helm_operator.drift.dependents import relist_changes, signature


def test_relist_reports_owners_of_changed_and_vanished_objects() -> None:
    old = {("ns", "a"): ("s1", "o1"), ("ns", "b"): ("s2", "o2"), ("ns", "c"): ("s3", "o3")}
    new = {("ns", "a"): ("s1", "o1"), ("ns", "b"): ("s2-changed", "o2"), ("ns", "d"): ("s4", "o4")}
    assert relist_changes(old, new) == {"o2", "o3"}
    assert relist_changes({}, new) == set()  # the first listing reports nothing


def test_signature_ignores_status_and_bookkeeping() -> None:
    cm = {"metadata": {"name": "c", "resourceVersion": "1", "managedFields": [1]}, "data": {"k": "v"}}
    moved = {**cm, "metadata": {"name": "c", "resourceVersion": "2"}, "status": {"x": 1}}
    assert signature(cm) == signature(moved)
    assert signature(cm) != signature({**cm, "data": {"k": "w"}})
    deploy = {
        "metadata": {"name": "d", "generation": 3, "labels": {"a": "1"}},
        "spec": {"replicas": 1},
        "status": {"readyReplicas": 0},
    }
    assert signature(deploy) == signature({**deploy, "status": {"readyReplicas": 1}})
    assert signature(deploy) != signature({**deploy, "metadata": {**deploy["metadata"], "generation": 4}})
