"""The storage fingerprints an idle resync trusts instead of reading Helm's storage."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from helm_operator.adapters import release_index
from helm_operator.adapters.release_index import ReleaseIndex, _Scope
from helm_operator.release.record import StoredRelease


def secret(ns: str, release: str, revision: int, rv: str, status: str = "deployed") -> dict[str, Any]:
    name = f"sh.helm.release.v1.{release}.v{revision}"
    labels = {"owner": "helm", "name": release, "version": str(revision), "status": status}
    return {"metadata": {"namespace": ns, "name": name, "labels": labels, "resourceVersion": rv}}


def index(*namespaces: str) -> ReleaseIndex:
    return ReleaseIndex(api=None, namespaces=namespaces)  # type: ignore[arg-type]  # never started


def test_no_fingerprint_until_listed_and_none_after_a_broken_watch() -> None:
    idx = index()
    assert idx.fingerprint("a", "web") is None
    idx.listed(None, [secret("a", "web", 1, "10")])
    first = idx.fingerprint("a", "web")
    assert first is not None
    idx.lost(None)
    assert idx.fingerprint("a", "web") is None
    idx.listed(None, [secret("a", "web", 1, "10")])
    assert idx.fingerprint("a", "web") == first


def test_every_write_or_removal_of_a_revision_changes_the_fingerprint() -> None:
    idx = index()
    idx.listed(None, [secret("a", "web", 1, "10"), secret("a", "db", 1, "11")])
    seen = {idx.fingerprint("a", "web")}
    idx.changed("ADDED", secret("a", "web", 2, "12"))  # an upgrade
    seen.add(idx.fingerprint("a", "web"))
    idx.changed("MODIFIED", secret("a", "web", 1, "13"))  # deployed -> superseded
    seen.add(idx.fingerprint("a", "web"))
    idx.changed("DELETED", secret("a", "web", 1, "13"))  # history pruned
    seen.add(idx.fingerprint("a", "web"))
    idx.changed("DELETED", secret("a", "web", 2, "12"))  # uninstalled by hand
    seen.add(idx.fingerprint("a", "web"))
    assert len(seen) == 5 and None not in seen
    db = idx.fingerprint("a", "db")
    idx.changed("ADDED", secret("b", "db", 1, "14"))  # the same name in another namespace
    assert idx.fingerprint("a", "db") == db


def test_a_namespace_scope_knows_only_its_namespace() -> None:
    idx = index("a", "b")
    idx.listed("a", [secret("a", "web", 1, "10")])
    assert idx.fingerprint("a", "web") is not None
    assert idx.fingerprint("b", "web") is None  # b's watch has not listed yet
    assert idx.fingerprint("c", "web") is None  # not watched at all
    idx.listed("b", [])
    before = idx.fingerprint("a", "web")
    idx.listed("a", [secret("a", "web", 1, "10"), secret("a", "web", 2, "15")])  # relisted after a gap
    assert idx.fingerprint("a", "web") != before


def test_a_remembered_record_serves_only_while_it_is_still_the_newest_revision() -> None:
    idx = index()
    v2 = StoredRelease(name="web", namespace="a", revision=2, status="deployed", owner="o", digest="d2")
    idx.remember(v2)  # printed by helm before the watch saw the revision
    assert idx.record("a", "web") is None  # nothing listed yet: unknown (and not kept)
    idx.listed(None, [secret("a", "web", 1, "10")])
    idx.remember(v2)
    assert idx.record("a", "web") is None  # the index has not seen revision 2 yet: read
    idx.changed("ADDED", secret("a", "web", 2, "12", "pending-upgrade"))
    assert idx.record("a", "web") is None  # not yet deployed as far as the storage says
    idx.changed("MODIFIED", secret("a", "web", 2, "13"))
    assert idx.record("a", "web") is v2
    idx.changed("MODIFIED", secret("a", "web", 1, "14", "superseded"))  # an older one: still v2
    assert idx.record("a", "web") is v2
    idx.changed("MODIFIED", secret("a", "web", 2, "15"))  # rewritten since (same labels): read
    assert idx.record("a", "web") is None
    idx.remember(v2, "15")  # read from the storage: bound to the Secret it was read from
    assert idx.record("a", "web") is v2
    idx.remember(v2, "14")  # a read older than what the watch shows
    assert idx.record("a", "web") is None
    idx.changed("ADDED", secret("a", "web", 3, "16", "pending-rollback"))  # helm rollback by hand
    assert idx.record("a", "web") is None
    idx.remember(StoredRelease(name="web", namespace="a", revision=3, status="pending-rollback", owner="o"))
    idx.forget("a", "web")  # about to unlock it
    assert idx.record("a", "web") is None


def test_records_are_kept_only_for_our_releases_in_watched_namespaces_and_not_for_ever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    idx = index("a")
    idx.listed("a", [secret("a", "web", 1, "10")])
    foreign = StoredRelease(name="web", namespace="a", revision=1, status="deployed", owner=None)
    idx.remember(foreign, "10")  # a release this operator did not make
    assert idx.record("a", "web") is None
    elsewhere = StoredRelease(name="web", namespace="b", revision=1, status="deployed", owner="o")
    idx.remember(elsewhere, "10")  # a namespace the index does not watch: never known, never kept
    assert idx.record("b", "web") is None and len(idx._records) == 0
    ours = StoredRelease(name="web", namespace="a", revision=1, status="deployed", owner="o")
    idx.remember(ours, "10")
    assert idx.record("a", "web") is ours
    later = time.monotonic() + release_index.RECORD_TTL + 1
    monkeypatch.setattr(release_index.time, "monotonic", lambda: later)
    assert idx.record("a", "web") is None  # every so often the storage is read all the same


def test_an_uninstalled_release_forgets_its_record() -> None:
    idx = index()
    idx.listed(None, [secret("a", "web", 1, "10")])
    old_life = StoredRelease(name="web", namespace="a", revision=1, status="deployed", owner="o")
    idx.remember(old_life, "10")
    assert idx.record("a", "web") is old_life
    idx.changed("DELETED", secret("a", "web", 1, "10"))
    idx.changed("ADDED", secret("a", "web", 1, "20"))  # installed again, by another resource
    assert idx.record("a", "web") is None
    idx.remember(old_life, "10")  # a read from before the uninstall, remembered late
    assert idx.record("a", "web") is None  # bound to the old Secret: not the new life's
    idx.remember(old_life)
    idx.lost(None)
    assert idx.record("a", "web") is None  # the watch broke: nothing is known
    idx.listed(None, [secret("a", "web", 1, "20")])
    assert idx.record("a", "web") is None  # a relist forgets what was remembered before the gap


def test_a_refused_listing_is_said_once_and_leaves_nothing_known(caplog: pytest.LogCaptureFixture) -> None:
    idx = index()
    idx.listed(None, [secret("a", "web", 1, "10")])
    scope = _Scope(api=None, namespace=None, index=idx)  # type: ignore[arg-type]
    idx.stopped.set()  # no real waiting between attempts
    refused = ApiException(status=403, reason="Forbidden")
    with caplog.at_level(logging.WARNING):
        scope._forbidden(refused)
        scope._forbidden(refused)
    said = [r.getMessage() for r in caplog.records if "cannot list Helm's release Secrets" in r.getMessage()]
    assert len(said) == 1 and "cluster-wide" in said[0] and "grant list and watch on secrets" in said[0]
    assert idx.fingerprint("a", "web") is None  # resyncs read the storage meanwhile
