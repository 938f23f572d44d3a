"""kopf's "last handled" essence, kept as a digest: built from what kopf keeps, the same as kopf's."""

from __future__ import annotations

import copy
from typing import Any

import kopf

from helm_operator.core.naming import KOPF_PREFIX
from helm_operator.runtime.handlers import DigestDiffBase

BODY: dict[str, Any] = {
    "apiVersion": "cache.example.com/v1alpha1",
    "kind": "Memcached",
    "metadata": {
        "name": "m",
        "namespace": "ns",
        "uid": "u-1",
        "resourceVersion": "42",
        "generation": 3,
        "labels": {"team": "a"},
        "annotations": {
            "note": "kept",
            "kubectl.kubernetes.io/last-applied-configuration": "{...}",
            f"{KOPF_PREFIX}/last-handled-digest": "abc",
        },
        "finalizers": ["helm-operator.io/uninstall"],
        "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}] * 20,
    },
    "spec": {"size": 3, "nested": {"list": [1, {"a": None}]}},
    "status": {"conditions": [{"type": "Ready", "status": "True"}] * 10, "release": {"revision": 4}},
}


def test_the_essence_is_kopfs_own_without_copying_status_and_managed_fields() -> None:
    ours = DigestDiffBase()
    kopfs = kopf.AnnotationsDiffBaseStorage(prefix=KOPF_PREFIX, key="last-handled-digest")
    body = kopf.Body(copy.deepcopy(BODY))
    assert ours.build(body=body) == kopfs.build(body=body)
    assert ours.build(body=body) == {
        "spec": BODY["spec"],
        "metadata": {"labels": {"team": "a"}, "annotations": {"note": "kept"}},
    }
    # A handler watching a status field would need it in the essence: kopf builds that itself.
    with_field = ours.build(body=body, extra_fields=[("status", "release")])
    assert with_field == kopfs.build(body=body, extra_fields=[("status", "release")])
    assert with_field["status"] == {"release": {"revision": 4}}


def test_the_digest_tells_a_handled_spec_from_a_changed_one() -> None:
    ours = DigestDiffBase()
    body = kopf.Body(copy.deepcopy(BODY))
    patch = kopf.Patch()
    ours.store(body=body, patch=patch, essence=ours.build(body=body))
    stored = patch["metadata"]["annotations"][f"{KOPF_PREFIX}/last-handled-digest"]
    handled = copy.deepcopy(BODY)
    handled["metadata"]["annotations"][f"{KOPF_PREFIX}/last-handled-digest"] = stored
    handled["status"] = {"conditions": []}  # a status write is no change
    assert ours.fetch(body=kopf.Body(handled)) == ours.build(body=kopf.Body(handled))
    handled["spec"]["size"] = 4
    assert ours.fetch(body=kopf.Body(handled)) == {"changed": stored}
