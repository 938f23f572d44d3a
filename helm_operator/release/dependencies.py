"""Dependencies between resources (pure): what a resource waits for before Helm acts for it.

A resource names what it depends on in the annotation ``helm-operator.io/depends-on``: objects of
any kind, ``<apiVersion>/<Kind>/[<namespace>/]<name>[:<Condition>]``, separated by commas or new
lines (``apps/v1/Deployment/db-proxy``, ``v1/Service/infra/dns``,
``postgresql.example.com/v1alpha1/PostgreSQLCluster/db:Ready``). Without a condition an object
is ready by kstatus' rules; with one, when that condition is ``True`` (and, where the object says
which generation it describes, for its latest generation). Before an install or upgrade, every
dependency must be ready; a cycle is an error naming it. On deletion the order reverses: a
resource is uninstalled only once nothing that depends on it is left.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from helm_operator.core.vocabulary import ConditionType
from helm_operator.release.health import why_unready

_KIND = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_CONDITION = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
_SEPARATORS = re.compile(r"[,\s]+")


class DependencyError(ValueError):
    """An entry of the annotation that cannot be read, and why."""


@dataclass(frozen=True, order=True)
class Ref:
    """One object, as the annotation names it and as the API serves it."""

    api_version: str
    kind: str
    namespace: str | None
    name: str

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind}/{where}{self.name}"


@dataclass(frozen=True)
class Dependency:
    ref: Ref
    condition: str | None = None  # None: ready by kstatus

    def __str__(self) -> str:
        return f"{self.ref}" + (f" ({self.condition})" if self.condition else "")


def parse(text: str, namespace: str | None) -> tuple[Dependency, ...]:
    """The dependencies an annotation names; an object in no namespace of its own is in
    ``namespace`` (the resource's)."""
    found = []
    for entry in (e for e in _SEPARATORS.split(text.strip()) if e):
        body, _, condition = entry.partition(":")
        if condition and not _CONDITION.match(condition):
            raise DependencyError(f"{entry!r}: {condition!r} is not a condition type")
        parts = body.split("/")
        at = next((i for i, p in enumerate(parts) if _KIND.match(p)), None)
        if at is None or at not in (1, 2) or len(parts) - at - 1 not in (1, 2):
            raise DependencyError(
                f"{entry!r}: expected <apiVersion>/<Kind>/[<namespace>/]<name>[:<Condition>], "
                "e.g. apps/v1/Deployment/web or v1/Service/infra/dns:Ready"
            )
        api_version, kind, rest = "/".join(parts[:at]), parts[at], parts[at + 1 :]
        name = rest[-1]
        ns = rest[0] if len(rest) == 2 else namespace
        for what, value in (("name", name), ("namespace", ns or "x")):
            if not _NAME.match(value):
                raise DependencyError(f"{entry!r}: {value!r} is not a valid {what}")
        found.append(Dependency(Ref(api_version, kind, ns, name), condition or None))
    return tuple(dict.fromkeys(found))


def _condition(obj: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return None


def _stale(obj: Mapping[str, Any], observed: Any) -> bool:
    generation = (obj.get("metadata") or {}).get("generation")
    return isinstance(observed, int) and isinstance(generation, int) and observed < generation


def why_not_ready(dep: Dependency, obj: Mapping[str, Any] | None) -> str | None:
    """Why ``dep`` is not ready yet (None: it is)."""
    if obj is None:
        return "not found"
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return "being deleted"
    status = obj.get("status") or {}
    if dep.condition is not None:
        c = _condition(obj, dep.condition)
        if c is None:
            return f"has no {dep.condition} condition yet"
        if c.get("status") != "True":
            return f"{dep.condition}={c.get('status')} ({c.get('reason') or 'no reason'})"
        if _stale(obj, c.get("observedGeneration", status.get("observedGeneration"))):
            return f"{dep.condition} is about an older generation"
        return None
    workload = why_unready(obj)  # Deployments, StatefulSets, …: their own readiness rules
    if workload is not None:
        return workload
    if _stale(obj, status.get("observedGeneration")):
        return "its controller has not seen the latest spec"
    kstatus = (ConditionType.STALLED, ConditionType.RECONCILING, ConditionType.READY)
    stalled, reconciling, ready = (_condition(obj, t) for t in kstatus)
    if stalled is not None and stalled.get("status") == "True":
        return f"stalled ({stalled.get('reason') or 'no reason'})"
    if reconciling is not None and reconciling.get("status") == "True":
        return f"reconciling ({reconciling.get('reason') or 'no reason'})"
    if ready is not None and ready.get("status") != "True":
        return f"Ready={ready.get('status')} ({ready.get('reason') or 'no reason'})"
    return None


def find_cycle(start: Ref, depends_on: Callable[[Ref], Sequence[Ref]], limit: int = 64) -> list[Ref] | None:
    """A path ``start → … → start`` through what each object depends on, if there is one (the
    first found; at most ``limit`` objects are looked at)."""
    path: list[Ref] = [start]
    seen: set[Ref] = set()

    def walk(node: Ref) -> list[Ref] | None:
        if len(seen) >= limit:
            return None
        seen.add(node)
        for nxt in depends_on(node):
            if nxt == start:
                return [*path, start]
            if nxt in seen:
                continue
            path.append(nxt)
            found = walk(nxt)
            if found is not None:
                return found
            path.pop()
        return None

    return walk(start)


def describe_cycle(cycle: Sequence[Ref]) -> str:
    return " → ".join(str(r) for r in cycle)


@dataclass
class Dependents:
    """Who depends on whom, as the resources served here last said (for the reverse order of
    uninstalls): filled by every reconcile, emptied as resources go."""

    _on: dict[Ref, frozenset[Ref]] = field(default_factory=dict)

    def record(self, who: Ref, deps: Iterable[Dependency]) -> None:
        on = frozenset(d.ref for d in deps)
        if on:
            self._on[who] = on
        else:
            self._on.pop(who, None)

    def forget(self, who: Ref) -> None:
        self._on.pop(who, None)

    def of(self, target: Ref) -> list[Ref]:
        """The resources that depend on ``target`` (itself excluded)."""
        return sorted(who for who, on in self._on.items() if target in on and who != target)
