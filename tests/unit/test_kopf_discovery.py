"""Namespaces that appear between kopf's first listing and its watch are served; CRDs are noticed
by name, kopf's own CRD watch (a listing of every CRD with its schema) is off."""

from __future__ import annotations

import asyncio
import contextlib
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
    monkeypatch.setattr(observation, "resource_observer", observation.resource_observer)
    kopf_discovery.adapt_kopf_observation()
    kopf_discovery.adapt_kopf_observation()  # twice: wrapped once
    process = observation.process_discovered_namespace_event
    assert not getattr(process.__wrapped__, "__wrapped_listing__", False)  # type: ignore[attr-defined]
    insights = references.Insights()
    _revise(process, "dfn-1", insights)
    _revise(process, "other", insights)
    assert insights.namespaces == {"dfn-1"}


def test_a_crd_names_its_group() -> None:
    assert kopf_discovery.crd_group("nullishes.test.helm-operator.io") == "test.helm-operator.io"
    assert kopf_discovery.crd_group("widgets") == ""


def test_groups_kopf_rescans_are_the_handlers_unless_one_names_none() -> None:
    groups = kopf_discovery.scanned_groups({"example.com", "", "apiextensions.k8s.io"})
    assert groups == frozenset({"example.com", "", "apiextensions.k8s.io"})
    assert kopf_discovery.rescans("example.com", groups)
    assert not kopf_discovery.rescans("g1.many-crds.bench.example", groups)
    assert kopf_discovery.scanned_groups({"example.com", None}) is None
    assert kopf_discovery.rescans("g1.many-crds.bench.example", None)


def test_the_groups_are_the_handlers_and_kopfs_backbone() -> None:
    groups = kopf_discovery._handler_groups(_registry(), references.Insights())
    assert {"test.helm-operator.io", "apiextensions.k8s.io", ""} <= groups


def _observe(settings: kopf.OperatorSettings) -> list[bool]:
    """What scanning setting kopf's resource observer was run with (the CRD noticing beside it
    waits for a backbone no cluster fills: stopped after a moment)."""
    seen: list[bool] = []

    async def original(*, settings: Any, registry: Any, insights: Any) -> None:
        seen.append(settings.scanning.disabled)

    observe = kopf_discovery._resource_observer(original)

    async def run() -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                observe(settings=settings, registry=_registry(), insights=references.Insights()), 0.3
            )

    asyncio.run(run())
    return seen


def test_kopfs_crd_watch_is_off_for_its_resource_observer_alone() -> None:
    settings = kopf.OperatorSettings()
    assert _observe(settings) == [True]
    assert settings.scanning.disabled is False  # the namespace observer keeps the real settings


def test_scanning_disabled_by_choice_stays_kopfs_own_behaviour() -> None:
    settings = kopf.OperatorSettings()
    settings.scanning.disabled = True
    assert _observe(settings) == [True]
