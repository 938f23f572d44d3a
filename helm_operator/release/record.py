"""A release as Helm's storage records it (read from the API, no ``helm`` process)."""

from __future__ import annotations

from dataclasses import dataclass, field

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
