"""A release's parsed manifest: what readiness reads and dependent watches need, cached per
revision without copies; whole objects copied for callers who change them."""

from __future__ import annotations

import pytest

from helm_operator.drift import check
from helm_operator.drift.check import ObjectId, manifest_ids, manifest_objects
from helm_operator.release.record import StoredRelease

MANIFEST = """
---
# Source: web/templates/cm.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: web
data: {a: "1"}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: other
spec: {replicas: 2}
---
# an empty document and a list are not objects
"""


def release(revision: int, name: str = "web") -> StoredRelease:
    return StoredRelease(name, "ns", revision, "deployed", manifest=MANIFEST)


def test_ids_name_every_object_as_the_manifest_does() -> None:
    ids = manifest_ids(release(1))
    assert ids == (
        ObjectId("v1", "ConfigMap", None, "web"),
        ObjectId("apps/v1", "Deployment", "other", "web"),
    )
    assert ids[1].doc() == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "other"},
    }
    assert ids[0].doc()["metadata"] == {"name": "web"}  # the release namespace is the reader's


def test_objects_are_copies_a_caller_may_change() -> None:
    first = manifest_objects(release(2))
    first[0]["data"]["a"] = "changed"
    assert manifest_objects(release(2))[0]["data"] == {"a": "1"}
    assert first[0]["metadata"]["annotations"]["meta.helm.sh/release-name"] == "web"


def test_caches_keep_the_most_recently_used_revisions_within_their_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(check, "_PARSED_MAX", 2)
    monkeypatch.setattr(check, "_IDS_MAX", 3)
    check._PARSED.clear()
    check._IDS.clear()
    for revision in range(10, 15):
        manifest_ids(release(revision))
    manifest_ids(release(12))  # used again: kept, the oldest others go
    manifest_ids(release(15))
    assert list(check._IDS) == [("ns", "web", 14), ("ns", "web", 12), ("ns", "web", 15)]
    assert list(check._PARSED) == [("ns", "web", 15)]  # whole objects: the newest revision alone
    for name in ("a", "b", "c"):
        manifest_objects(release(1, name))
    assert list(check._PARSED) == [("ns", "b", 1), ("ns", "c", 1)]


def test_a_new_revision_s_objects_replace_the_older_revisions_of_the_same_release() -> None:
    """An upgraded release is never compared with its older revisions again: at 1000 releases,
    keeping them would hold ~10 KiB a release for nothing and push current ones out."""
    check._PARSED.clear()
    manifest_objects(release(1, "web"))
    manifest_objects(release(1, "api"))
    manifest_objects(release(2, "web"))
    assert list(check._PARSED) == [("ns", "api", 1), ("ns", "web", 2)]
    manifest_objects(release(2, "web"))  # the same revision again: parsed once
    assert list(check._PARSED) == [("ns", "api", 1), ("ns", "web", 2)]


def test_a_revision_whose_objects_were_named_at_its_post_render_is_not_parsed() -> None:
    named = (ObjectId("apps/v1", "Deployment", None, "web"),)
    made = StoredRelease("made", "ns", 1, "deployed", manifest="{ not: [yaml", objects=named)
    assert manifest_ids(made) == named
    assert ("ns", "made", 1) not in check._PARSED
