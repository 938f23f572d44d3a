"""What a release leaves behind when Helm's record of it is gone: where to look for its objects.

An uninstall that finds nothing to uninstall (the record missing when read, or Helm saying "not
found" because the record went after it was read: the namespace controller deletes the release
Secrets of a terminating namespace) deletes nothing itself. Objects in the release namespace carry
an ownerReference to the resource or go with the namespace; the rest (cluster-scoped objects,
objects in other namespaces) would stay for good. They carry the owner label, which names one
resource exactly, so they are found by it: this module decides in which kinds (pure); the runtime
lists and deletes (``runtime.reconcile``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from helm_operator.release.record import ObjectId


class Kind(Protocol):
    """A served kind as discovery reports it (``adapters.discovery.ServedKind``)."""

    @property
    def group(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def namespaced(self) -> bool: ...


K = TypeVar("K", bound=Kind)


def group_of(api_version: str) -> str:
    """``apps/v1`` → ``apps``; ``v1`` → the core group ``""``."""
    return api_version.rpartition("/")[0]


def rendered_outside(
    served: Sequence[Kind], rendered: Iterable[ObjectId], namespace: str
) -> frozenset[tuple[str, str]]:
    """``(group, kind)`` of the objects a release's manifest put outside its ``namespace``: the
    cluster-scoped ones and those naming another namespace. A kind no longer served is left out:
    nothing of it can exist."""
    scope = {(k.group, k.kind): k.namespaced for k in served}
    outside = set()
    for o in rendered:
        key = (group_of(o.api_version), o.kind)
        namespaced = scope.get(key)
        if namespaced is None:
            continue
        if not namespaced or (o.namespace or namespace) != namespace:
            outside.add(key)
    return frozenset(outside)


def sweep_kinds(
    served: Sequence[K],
    *,
    cluster_scoped: bool,
    other_namespaces: bool,
    rendered: frozenset[tuple[str, str]] = frozenset(),
) -> list[K]:
    """The kinds in which to look for the owner label: those the watch lets a release put outside
    its namespace (``cluster_scoped`` kinds; namespaced kinds when ``other_namespaces``), and
    whatever the release's last record rendered outside it (``rendered_outside``), whatever the
    watch allows now (a watch tightened after the install: Helm itself would have deleted them)."""
    return [
        k
        for k in served
        if (k.group, k.kind) in rendered or (other_namespaces if k.namespaced else cluster_scoped)
    ]
