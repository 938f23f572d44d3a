"""A release as Helm's storage records it (read from the API, no ``helm`` process)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from helm_operator.core.naming import DIGEST_LABEL, FLEET_LABEL, OWNER_LABEL, REVISION_LABEL

PENDING_STATUSES = frozenset({"pending-install", "pending-upgrade", "pending-rollback", "uninstalling"})
# The description the operator writes when it marks a stale pending-* revision failed.
UNLOCKED_PREFIX = "Unlocked by helm-operator"
HOOK_ANNOTATION = "helm.sh/hook"  # Helm keeps such objects as hooks, out of the release's manifest


class ObjectId(NamedTuple):
    """Which object a manifest names, and nothing else of it."""

    api_version: str
    kind: str
    namespace: str | None  # as the manifest says (None: the release namespace, if namespaced)
    name: str

    def doc(self) -> dict[str, Any]:
        """A minimal manifest object naming it (what ``Kube.get`` needs)."""
        meta = {"name": self.name, **({"namespace": self.namespace} if self.namespace else {})}
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": meta}


def object_id(doc: Mapping[str, Any]) -> ObjectId:
    meta = doc.get("metadata") or {}
    return ObjectId(str(doc["apiVersion"]), str(doc["kind"]), meta.get("namespace"), str(meta.get("name")))


def manifest_ids_of(rendered: Iterable[Any]) -> tuple[ObjectId, ...]:
    """The objects a release's manifest will hold, from the rendered stream's documents: every
    object but Helm's hooks (kept apart, with their own annotation)."""
    return tuple(
        object_id(d)
        for d in rendered
        if isinstance(d, Mapping)
        and d.get("kind")
        and HOOK_ANNOTATION not in ((d.get("metadata") or {}).get("annotations") or {})
    )


@dataclass(frozen=True)
class StoredRelease:
    """The latest revision in Helm's storage, as read from the API (no ``helm`` process)."""

    name: str
    namespace: str
    revision: int
    status: str
    owner: str | None = None
    digest: str | None = None
    chart_name: str = ""
    chart_version: str = ""
    app_version: str = ""
    ever_deployed: bool = False
    interrupted: bool = False  # failed because its writer died mid-action (unlocked), not by its own fault
    manifest: str = field(default="", repr=False, compare=False)  # the rendered objects (YAML stream)
    # How Helm applied it: "ssa" (server-side apply) or "csa" (a three-way merge patch: Helm 3, whose
    # records do not say, and Helm 4 on releases first made that way); the next upgrade does the same.
    apply_method: str = ""
    stamped: int | None = None  # the revision the operator stamped (REVISION_LABEL); None: none
    rollback: bool = False  # made by ``helm rollback`` (it copies the target revision's labels)
    # The objects of ``manifest`` when known without parsing it: named by the post-render of the
    # helm call that made this revision (None: parse the manifest when they are needed).
    objects: tuple[ObjectId, ...] | None = field(default=None, repr=False, compare=False)
    fleet: str | None = None  # the fleet inputs it was made from (FLEET_LABEL); None: not recorded
    # Every test hook of its chart passed its last run (True when it has none): what Helm records
    # in the revision when `helm test` runs it.
    tested: bool = True

    @property
    def by_hand(self) -> bool:
        """Made by someone running ``helm upgrade`` on the release: it carries the labels of the
        operator's last revision, stamped with an older number."""
        return self.stamped is not None and self.stamped < self.revision and not self.rollback


def from_body(
    body: Mapping[str, Any],
    *,
    name: str,
    namespace: str,
    revision: int,
    status: str,
    labels: Mapping[str, str],
    ever_deployed: bool,
    objects: tuple[ObjectId, ...] | None = None,
) -> StoredRelease:
    """A revision's record from Helm's release document: the body of a storage Secret, or what
    ``helm upgrade --output json`` prints (so an action needs no read of the storage after it)."""
    meta = (body.get("chart") or {}).get("metadata") or {}
    description = str((body.get("info") or {}).get("description", ""))
    return StoredRelease(
        name=name,
        namespace=namespace,
        revision=revision,
        status=status,
        owner=labels.get(OWNER_LABEL),
        digest=labels.get(DIGEST_LABEL),
        chart_name=str(meta.get("name", "")),
        chart_version=str(meta.get("version", "")),
        app_version=str(meta.get("appVersion", "") or ""),
        ever_deployed=ever_deployed,
        interrupted=description.startswith(UNLOCKED_PREFIX),
        manifest=str(body.get("manifest") or ""),
        apply_method=str(body.get("apply_method") or "csa"),
        stamped=int(stamp) if (stamp := str(labels.get(REVISION_LABEL, ""))).isdigit() else None,
        rollback=description.startswith("Rollback to "),
        objects=objects,
        fleet=labels.get(FLEET_LABEL),
        tested=passed_its_tests(body.get("hooks") or []),
    )


TEST_EVENTS = frozenset({"test", "test-success"})  # Helm 2's name is still accepted by Helm


def passed_its_tests(hooks: Any) -> bool:
    """Whether each test hook of a release (Helm's ``hooks``, with ``events`` and ``last_run``)
    succeeded when it last ran; a release without test hooks has nothing to fail."""
    tests = [h for h in hooks if isinstance(h, Mapping) and TEST_EVENTS & set(h.get("events") or [])]
    return all(((h.get("last_run") or {}).get("phase") or "") == "Succeeded" for h in tests)
