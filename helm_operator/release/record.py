"""A release as Helm's storage records it (read from the API, no ``helm`` process)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from helm_operator.core.naming import DIGEST_LABEL, OWNER_LABEL, REVISION_LABEL

PENDING_STATUSES = frozenset({"pending-install", "pending-upgrade", "pending-rollback", "uninstalling"})
# The description the operator writes when it marks a stale pending-* revision failed.
UNLOCKED_PREFIX = "Unlocked by helm-operator"


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
    )
