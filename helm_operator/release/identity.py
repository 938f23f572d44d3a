"""Which Helm release a custom resource owns: name, namespace and the owner id on its objects."""

from __future__ import annotations

from dataclasses import dataclass

from helm_operator.config.watches import Watch
from helm_operator.core.naming import owner_id, release_name


@dataclass(frozen=True)
class ReleaseId:
    name: str
    namespace: str
    owner: str  # the value of the owner label on the release and every object it renders

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def identify(watch: Watch, namespace: str | None, name: str) -> ReleaseId:
    """Release name = CR name (made valid for Helm); namespace = the CR's, or the watch's for
    cluster-scoped kinds."""
    rel_ns = watch.release_namespace if watch.scope == "Cluster" or not namespace else namespace
    assert rel_ns is not None
    return ReleaseId(release_name(name), rel_ns, owner_id(watch.group, watch.kind, namespace or "", name))
