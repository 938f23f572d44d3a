"""Where a release may put its objects: scope of each kind, and the tenant rules a Watch sets.

Pure. The post-renderer applies these rules to every rendered object (hooks included, Helm 3.21+
and 4) before Helm creates anything, so a namespaced resource cannot reach another namespace or
the cluster scope through its values (a ``namespaceOverride``) unless its Watch allows it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helm_operator.core.vocabulary import Reason

Scopes = Mapping[str, bool]  # "<group>/<Kind>" -> namespaced ("" group for the core API)


def kind_key(api_version: str, kind: str) -> str:
    group = api_version.rpartition("/")[0]
    return f"{group}/{kind}"


def scopes_with_crds(scopes: Scopes, docs: Iterable[Mapping[str, Any]]) -> dict[str, bool]:
    """The server's scopes plus those of CustomResourceDefinitions rendered in the same stream."""
    out = dict(scopes)
    for doc in docs:
        if doc.get("kind") == "CustomResourceDefinition":
            spec = doc.get("spec") or {}
            kind = (spec.get("names") or {}).get("kind")
            if spec.get("group") and kind:
                out[f"{spec['group']}/{kind}"] = spec.get("scope", "Namespaced") == "Namespaced"
    return out


def namespaced(doc: Mapping[str, Any], scopes: Scopes) -> bool | None:
    """Whether the object's kind is namespaced; None when the kind is unknown."""
    return scopes.get(kind_key(str(doc.get("apiVersion", "")), str(doc.get("kind", ""))))


@dataclass(frozen=True)
class TenantRules:
    """What a Watch allows beyond the release's own namespace."""

    enforce: bool = True  # False for cluster-scoped custom resources (created by cluster admins)
    allowed_namespaces: tuple[str, ...] = ()  # extra namespaces (globs)
    allow_cluster_scoped: bool = False


NOT_ENFORCED = TenantRules(enforce=False)


@dataclass(frozen=True)
class Violation:
    reason: Reason  # NAMESPACE_VIOLATION | CLUSTER_SCOPED_NOT_ALLOWED
    message: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


def violations(
    docs: Sequence[Mapping[str, Any]], namespace: str, scopes: Scopes, rules: TenantRules
) -> list[Violation]:
    """Objects a release may not create, each named (kind/name and where it would go)."""
    if not rules.enforce:
        return []
    found = []
    for doc in docs:
        meta = doc.get("metadata") or {}
        ref = f"{doc.get('kind')}/{meta.get('name')}"
        scoped = namespaced(doc, scopes)
        if scoped is False:
            if not rules.allow_cluster_scoped:
                found.append(
                    Violation(
                        Reason.CLUSTER_SCOPED_NOT_ALLOWED,
                        f"{ref} is cluster-scoped; the watch does not set allowClusterScoped",
                    )
                )
            continue
        target = meta.get("namespace")
        if (
            target
            and target != namespace
            and not any(fnmatch.fnmatch(target, p) for p in rules.allowed_namespaces)
        ):
            allowed = ", ".join([namespace, *rules.allowed_namespaces])
            found.append(
                Violation(
                    Reason.NAMESPACE_VIOLATION, f"{ref} targets namespace {target!r}; allowed: {allowed}"
                )
            )
    return found
