"""The storage fingerprints an idle resync trusts instead of reading Helm's storage."""

from __future__ import annotations

from typing import Any

from helm_operator.adapters.release_index import ReleaseIndex


def secret(ns: str, release: str, revision: int, rv: str) -> dict[str, Any]:
    name = f"sh.helm.release.v1.{release}.v{revision}"
    labels = {"owner": "helm", "name": release, "version": str(revision)}
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
