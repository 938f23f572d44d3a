"""kopf's discovery of namespaces and CRDs, closed over the moment it starts watching.

kopf lists namespaces (and CRDs) once, then starts a watch that lists them again before it
streams changes, and it ignores every object of that second listing. A namespace matching
``--namespace 'team-*'`` (or a CRD of a watched kind) created between the two listings is in
neither: it is not served until something modifies it, which for a namespace can be never.
A tenant who creates a namespace and a resource in it while the operator starts (a rollout,
a restart) would see nothing happen. The wrappers below take the second listing's objects
into account, as kopf does for the first: a namespace already known is added again (a
set), a CRD of a watched group that kopf does not yet serve makes it scan that group.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from kopf._core.reactor import observation

_Processor = Callable[..., Awaitable[None]]


def _listed(raw_event: Any) -> bool:
    """An object of a watch's initial listing (kopf marks those with no event type)."""
    return raw_event.get("type") is None


def _wanted_groups(registry: Any) -> set[str | None]:
    selectors = (
        registry._changing.get_all_selectors()
        | registry._watching.get_all_selectors()
        | registry._spawning.get_all_selectors()
        | registry._indexing.get_all_selectors()
    )
    return {selector.group for selector in selectors}


def _unserved_crd(crd: dict[str, Any], registry: Any, insights: Any) -> bool:
    """A CRD of a group the handlers select whose resource kopf does not serve yet."""
    spec = crd.get("spec") or {}
    group, plural = spec.get("group"), (spec.get("names") or {}).get("plural")
    groups = _wanted_groups(registry)
    if group not in groups and None not in groups:
        return False
    known = insights.watched_resources | insights.indexed_resources | insights.webhook_resources
    return not any(r.group == group and r.plural == plural for r in known)


def _namespaces(original: _Processor) -> _Processor:
    @functools.wraps(original)
    async def process(*, raw_event: Any, namespaces: Any, insights: Any, **kwargs: Any) -> None:
        if _listed(raw_event):
            async with insights.revised:
                observation.revise_namespaces(
                    raw_bodies=[raw_event["object"]], insights=insights, namespaces=namespaces
                )
                insights.revised.notify_all()
            return
        await original(raw_event=raw_event, namespaces=namespaces, insights=insights, **kwargs)

    process.__wrapped_listing__ = True  # type: ignore[attr-defined]
    return process


def _resources(original: _Processor) -> _Processor:
    @functools.wraps(original)
    async def process(*, raw_event: Any, registry: Any, insights: Any, **kwargs: Any) -> None:
        if _listed(raw_event) and _unserved_crd(raw_event["object"], registry, insights):
            raw_event = {**raw_event, "type": "ADDED"}
        await original(raw_event=raw_event, registry=registry, insights=insights, **kwargs)

    process.__wrapped_listing__ = True  # type: ignore[attr-defined]
    return process


def notice_what_appears_while_listing() -> None:
    """Install the wrappers (once; kopf looks them up by name when its observers start)."""
    for name, wrap in (
        ("process_discovered_namespace_event", _namespaces),
        ("process_discovered_resource_event", _resources),
    ):
        current = getattr(observation, name)
        if not getattr(current, "__wrapped_listing__", False):
            setattr(observation, name, wrap(current))
