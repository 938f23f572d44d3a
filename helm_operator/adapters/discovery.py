"""API discovery: the plural and scope of every kind the API server serves, as the server says.

One aggregated-discovery request per API root (``/api`` and ``/apis``) lists every group, version
and resource with its kind and scope. Nothing is guessed: a watched kind is served under the plural
its CRD declares (``KubeStateMetrics`` → ``kubestatemetrics``), and the post-renderer knows which
kinds are cluster-scoped. Synchronous: call it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes import client

from helm_operator.adapters.kube import request_json

log = logging.getLogger(__name__)
T = TypeVar("T")

# Aggregated discovery (GA in Kubernetes 1.30, beta since 1.26): one request per API root.
_AGGREGATED = ",".join(
    (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
        "application/json",
    )
)


@dataclass(frozen=True)
class ServedKind:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    verbs: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()  # plural, singular, lower-case kind, short names
    preferred: bool = True  # of its group's preferred version (listed first)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None, name: str | None = None) -> str:
        """The URL path of its objects (in ``namespace`` if it is namespaced), or of one of them."""
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        scope = f"/namespaces/{namespace}" if self.namespaced and namespace is not None else ""
        return f"{base}{scope}/{self.plural}" + (f"/{name}" if name is not None else "")


def served(documents: Iterable[Mapping[str, Any]]) -> list[ServedKind]:
    """Every kind of aggregated discovery documents (``/api``, ``/apis``), in their order: a group's
    preferred version first."""
    found = []
    for doc in documents:
        for group in doc.get("items") or ():
            name = (group.get("metadata") or {}).get("name") or ""
            for i, ver in enumerate(group.get("versions") or ()):
                for res in ver.get("resources") or ():
                    kind = (res.get("responseKind") or {}).get("kind")
                    if not kind:
                        continue
                    names = {
                        res["resource"],
                        res.get("singularResource"),
                        kind.lower(),
                        *res.get("shortNames", ()),
                    }
                    found.append(
                        ServedKind(
                            name,
                            ver["version"],
                            kind,
                            res["resource"],
                            res.get("scope") == "Namespaced",
                            frozenset(res.get("verbs") or ()),
                            frozenset(n for n in names if n),
                            i == 0,
                        )
                    )
    return found


class Discovery:
    """A snapshot of what the API server serves, refreshed on demand. ``timeout``: seconds for each
    of its requests (None: the client's default)."""

    def __init__(self, api: client.ApiClient, max_age: float = 30.0, timeout: float | None = None) -> None:
        self.api = api
        self.max_age = max_age
        self.timeout = timeout
        self._kinds: dict[tuple[str, str, str], ServedKind] = {}
        self._taken = 0.0

    def refresh(self) -> None:
        docs = [request_json(self.api, "GET", root, headers={"Accept": _AGGREGATED}, timeout=self.timeout)
                for root in ("/api", "/apis")]  # fmt: skip
        kinds: dict[tuple[str, str, str], ServedKind] = {}
        for served_kind in served(docs):
            kinds.setdefault((served_kind.group, served_kind.version, served_kind.kind), served_kind)
        self._kinds = kinds
        self._taken = time.monotonic()

    def _fresh(self) -> dict[tuple[str, str, str], ServedKind]:
        if time.monotonic() - self._taken > self.max_age:
            self.refresh()
        return self._kinds

    def lookup(self, pick: Callable[[Collection[ServedKind]], T | None]) -> T | None:
        """What ``pick`` finds among the served kinds; when it finds nothing, the server is asked
        again (at most once a second) and ``pick`` tried once more: a kind made since."""
        found = pick(self._fresh().values())
        if found is None and time.monotonic() - self._taken > 1.0:
            self.refresh()
            found = pick(self._kinds.values())
        return found

    def find(self, group: str, version: str, kind: str) -> ServedKind | None:
        """The served kind, re-asking the server once if it is not (yet) in the snapshot."""
        return self.lookup(lambda _: self._kinds.get((group, version, kind)))

    def scopes(self) -> dict[str, bool]:
        """``{"<group>/<Kind>": namespaced}`` for every served kind (what the post-renderer reads)."""
        return {f"{k.group}/{k.kind}": k.namespaced for k in self._fresh().values()}

    def crd_names(self, wanted: Collection[str] = ()) -> frozenset[str]:
        """``<plural>.<group>`` of every served kind of a named group: the names the CRDs that
        serve them have (a chart's ``crds/`` that already exist need not be created). A name in
        ``wanted`` that the snapshot lacks has the server asked again (once a second at most)."""

        def names(kinds: Collection[ServedKind]) -> frozenset[str]:
            return frozenset(f"{k.plural}.{k.group}" for k in kinds if k.group)

        def every(kinds: Collection[ServedKind]) -> frozenset[str] | None:
            found = names(kinds)
            return found if all(w in found for w in wanted) else None

        found = self.lookup(every)
        return found if found is not None else names(self._kinds.values())

    def deletable(self) -> list[ServedKind]:
        """One served version (the preferred: listed first) of every kind that can be listed and
        deleted, for finding a release's objects by label when Helm's record of them is gone."""
        seen: dict[tuple[str, str], ServedKind] = {}
        for k in self._fresh().values():
            if {"list", "delete"} <= k.verbs:
                seen.setdefault((k.group, k.kind), k)
        return list(seen.values())
