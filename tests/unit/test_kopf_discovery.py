"""Namespaces and CRDs that appear between kopf's first listing and its watch are served."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest
from kopf._cogs.structs import references
from kopf._core.reactor import observation

from helm_operator.runtime import kopf_discovery


def _listed_namespace(name: str) -> dict[str, Any]:
    return {"type": None, "object": {"metadata": {"name": name}}}


def _crd(group: str, plural: str) -> dict[str, Any]:
    return {"spec": {"group": group, "names": {"plural": plural, "kind": plural.title()}}}


def _registry() -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.create("test.helm-operator.io", "v1", "nullishes", registry=registry)
    def _created(**_: Any) -> None:
        return None

    return registry


def _revise(process: Any, name: str, insights: references.Insights) -> None:
    async def run() -> None:
        await process(raw_event=_listed_namespace(name), namespaces=["dfn-*"], insights=insights)

    asyncio.run(run())


def test_kopf_alone_ignores_a_namespace_first_seen_in_its_watch_listing() -> None:
    """The race this module closes (if kopf stops ignoring them, the wrapper can go)."""
    insights = references.Insights()
    original = observation.process_discovered_namespace_event
    original = getattr(original, "__wrapped__", original)
    _revise(original, "dfn-1", insights)
    assert insights.namespaces == set()


def test_a_matching_namespace_in_the_watch_listing_is_served_and_others_are_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        observation, "process_discovered_namespace_event", observation.process_discovered_namespace_event
    )
    monkeypatch.setattr(
        observation, "process_discovered_resource_event", observation.process_discovered_resource_event
    )
    kopf_discovery.notice_what_appears_while_listing()
    kopf_discovery.notice_what_appears_while_listing()  # twice: wrapped once
    process = observation.process_discovered_namespace_event
    assert not getattr(process.__wrapped__, "__wrapped_listing__", False)
    insights = references.Insights()
    _revise(process, "dfn-1", insights)
    _revise(process, "other", insights)
    assert insights.namespaces == {"dfn-1"}


def test_a_crd_is_scanned_when_its_group_is_watched_and_kopf_does_not_serve_it_yet() -> None:
    registry, insights = _registry(), references.Insights()
    assert kopf_discovery._unserved_crd(_crd("test.helm-operator.io", "nullishes"), registry, insights)
    assert not kopf_discovery._unserved_crd(_crd("other.example.com", "widgets"), registry, insights)
    insights.watched_resources.add(
        references.Resource(group="test.helm-operator.io", version="v1", plural="nullishes", namespaced=True)
    )
    assert not kopf_discovery._unserved_crd(_crd("test.helm-operator.io", "nullishes"), registry, insights)


def test_an_unserved_crd_in_the_listing_reaches_kopf_as_added_a_served_one_as_listed() -> None:
    seen: list[Any] = []

    async def original(*, raw_event: Any, registry: Any, insights: Any, **_: Any) -> None:
        seen.append(raw_event["type"])

    process = kopf_discovery._resources(original)
    registry, insights = _registry(), references.Insights()

    async def run(crd: dict[str, Any]) -> None:
        await process(raw_event={"type": None, "object": crd}, registry=registry, insights=insights)

    asyncio.run(run(_crd("test.helm-operator.io", "nullishes")))
    asyncio.run(run(_crd("other.example.com", "widgets")))
    assert seen == ["ADDED", None]
