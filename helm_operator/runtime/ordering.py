"""Dependencies between resources, read from the cluster: may Helm act for a resource now, and
may its release be uninstalled yet (``release.dependencies`` decides; this reads what it needs)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from helm_operator.adapters.kube import Kube
from helm_operator.core.naming import DEPENDS_ON_ANNOTATION, FORCE_UNINSTALL_ANNOTATION
from helm_operator.core.vocabulary import Reason
from helm_operator.release.dependencies import (
    Dependency,
    DependencyError,
    Dependents,
    Ref,
    describe_cycle,
    find_cycle,
    parse,
    why_not_ready,
)
from helm_operator.release.outcome import Outcome
from helm_operator.release.state import Action
from helm_operator.runtime.desired import Resource

WAIT_FOR = frozenset({Action.INSTALL, Action.UPGRADE, Action.REINSTALL})  # what a dependency holds
POLL = 5.0  # seconds between looks at dependencies that are not ready yet
RECHECK_CYCLE = 10.0  # seconds between looks at a cycle or a bad annotation (another resource may end it)

_UNSERVED, _FORBIDDEN = object(), object()


def ref_of(cr: Resource) -> Ref:
    return Ref(cr.watch.api_version, cr.watch.kind, cr.namespace, cr.name)


def _fetch(kube: Kube, ref: Ref) -> Any:
    """The live object, None where it does not exist, ``_UNSERVED`` where its kind is not served,
    ``_FORBIDDEN`` where the operator may not read it."""
    doc = {"apiVersion": ref.api_version, "kind": ref.kind, "metadata": {"name": ref.name}}
    try:
        return kube.get(doc, ref.namespace or "")
    except ResourceNotFoundError:
        return _UNSERVED
    except ApiException as exc:
        if exc.status == 403:
            return _FORBIDDEN
        raise


def _look(kube: Kube, me: Ref, deps: tuple[Dependency, ...]) -> tuple[list[str], list[Ref] | None]:
    """What is not ready (in words), and a cycle through ``me`` if the annotations make one."""
    objects: dict[Ref, Any] = {}

    def fetched(ref: Ref) -> Any:
        if ref not in objects:
            objects[ref] = _fetch(kube, ref)
        return objects[ref]

    unready = []
    for dep in deps:
        obj = fetched(dep.ref)
        if obj is _UNSERVED:
            why: str | None = f"kind {dep.ref.api_version} {dep.ref.kind} is not served"
        elif obj is _FORBIDDEN:
            why = f"the operator may not read it (grant get on {dep.ref.kind} to its ServiceAccount)"
        else:
            why = why_not_ready(dep, obj)
        if why is not None:
            unready.append(f"{dep}: {why}")

    def depends_on(ref: Ref) -> list[Ref]:
        if ref == me:
            return [d.ref for d in deps]
        obj = fetched(ref)
        if not isinstance(obj, Mapping):
            return []
        text = ((obj.get("metadata") or {}).get("annotations") or {}).get(DEPENDS_ON_ANNOTATION)
        try:
            return [d.ref for d in parse(text, ref.namespace)] if text else []
        except DependencyError:  # that resource's own stall says so
            return []

    return unready, find_cycle(me, depends_on)


async def hold(
    kube: Kube, dependents: Dependents, cr: Resource, action: Action
) -> tuple[Outcome, float] | None:
    """Why Helm may not act for ``cr`` yet, and when to look again (None: it may). Records what
    the resource depends on, for the order of uninstalls. A cycle stalls the resource whatever
    the action: closed between two running releases, it is said when it closes, not at the
    next change."""
    me = ref_of(cr)
    text = cr.annotations.get(DEPENDS_ON_ANNOTATION)
    try:
        deps = parse(text, cr.namespace) if text else ()
    except DependencyError as exc:
        dependents.forget(me)
        message = f"annotation {DEPENDS_ON_ANNOTATION}: {exc}"
        return Outcome("stalled", Reason.INVALID_DEPENDENCY, message), RECHECK_CYCLE
    dependents.record(me, deps)
    if not deps:
        return None
    unready, cycle = await asyncio.to_thread(_look, kube, me, deps)
    if cycle is not None:
        message = f"dependency cycle: {describe_cycle(cycle)}; change {DEPENDS_ON_ANNOTATION} of one of them"
        return Outcome("stalled", Reason.DEPENDENCY_CYCLE, message), RECHECK_CYCLE
    if unready and action in WAIT_FOR:
        message = (
            f"{action} waits for {len(unready)} dependenc{'y' if len(unready) == 1 else 'ies'}: "
            + "; ".join(unready)
        )
        return Outcome("progressing", Reason.DEPENDENCY_NOT_READY, message), POLL
    return None


def still_needed(dependents: Dependents, me: Ref, annotations: Mapping[str, str]) -> str | None:
    """Why the release of ``me`` may not be uninstalled yet: resources served here that depend on
    it still exist (None: nothing does, or the force annotation says go)."""
    needed = dependents.of(me)
    if not needed or annotations.get(FORCE_UNINSTALL_ANNOTATION) == "true":
        return None
    names = ", ".join(str(r) for r in needed)
    return (
        f"uninstall waits until what depends on it is gone: {names} ({DEPENDS_ON_ANNOTATION}); "
        f"annotate {FORCE_UNINSTALL_ANNOTATION}=true to uninstall now"
    )
