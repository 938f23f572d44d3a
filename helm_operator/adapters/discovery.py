"""API discovery: the plural and scope of every kind the API server serves, as the server says.

One aggregated-discovery request per API root (``/api`` and ``/apis``) lists every group, version
and resource with its kind and scope. Nothing is guessed: a watched kind is served under the plural
its CRD declares (``KubeStateMetrics`` → ``kubestatemetrics``), and the post-renderer knows which
kinds are cluster-scoped. Synchronous: call it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from helm_operator.adapters.kube import request_json

log = logging.getLogger(__name__)

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


class Discovery:
    """A snapshot of what the API server serves, refreshed on demand."""

    def __init__(self, api: client.ApiClient, max_age: float = 30.0) -> None:
        self.api = api
        self.max_age = max_age
        self._kinds: dict[tuple[str, str, str], ServedKind] = {}
        self._taken = 0.0

    def _get(self, path: str) -> dict[str, Any]:
        return request_json(self.api, "GET", path, headers={"Accept": _AGGREGATED})

    def refresh(self) -> None:
        kinds: dict[tuple[str, str, str], ServedKind] = {}
        for root in ("/api", "/apis"):
            for group in self._get(root).get("items") or []:
                name = (group.get("metadata") or {}).get("name", "")
                for ver in group.get("versions") or []:
                    for res in ver.get("resources") or []:
                        kind = (res.get("responseKind") or {}).get("kind")
                        if not kind:
                            continue
                        served = ServedKind(
                            name,
                            ver["version"],
                            kind,
                            res["resource"],
                            res.get("scope") == "Namespaced",
                            frozenset(res.get("verbs") or ()),
                        )
                        kinds.setdefault((name, ver["version"], kind), served)
        self._kinds = kinds
        self._taken = time.monotonic()

    def _fresh(self) -> dict[tuple[str, str, str], ServedKind]:
        if time.monotonic() - self._taken > self.max_age:
            self.refresh()
        return self._kinds

    def find(self, group: str, version: str, kind: str) -> ServedKind | None:
        """The served kind, re-asking the server once if it is not (yet) in the snapshot."""
        found = self._fresh().get((group, version, kind))
        if found is None and time.monotonic() - self._taken > 1.0:
            self.refresh()
            found = self._kinds.get((group, version, kind))
        return found

    def scopes(self) -> dict[str, bool]:
        """``{"<group>/<Kind>": namespaced}`` for every served kind (what the post-renderer reads)."""
        return {f"{k.group}/{k.kind}": k.namespaced for k in self._fresh().values()}

    def crd_names(self, wanted: Collection[str] = ()) -> frozenset[str]:
        """``<plural>.<group>`` of every served kind of a named group: the names the CRDs that
        serve them have (a chart's ``crds/`` that already exist need not be created). A name in
        ``wanted`` that the snapshot lacks has the server asked again (once a second at most)."""

        def names() -> frozenset[str]:
            return frozenset(f"{k.plural}.{k.group}" for k in self._fresh().values() if k.group)

        found = names()
        if any(w not in found for w in wanted) and time.monotonic() - self._taken > 1.0:
            self.refresh()
            found = names()
        return found

    def deletable(self) -> list[ServedKind]:
        """One served version (the preferred: listed first) of every kind that can be listed and
        deleted, for finding a release's objects by label when Helm's record of them is gone."""
        seen: dict[tuple[str, str], ServedKind] = {}
        for k in self._fresh().values():
            if {"list", "delete"} <= k.verbs:
                seen.setdefault((k.group, k.kind), k)
        return list(seen.values())
