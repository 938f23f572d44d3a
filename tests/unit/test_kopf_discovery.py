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


def _resource(group: str, plural: str) -> references.Resource:
    return references.Resource(group=group, version="v1", plural=plural, namespaced=True)


def test_a_scan_is_read_by_crd_name() -> None:
    again, other = _resource("g.example.com", "agains"), _resource("g.example.com", "others")
    assert kopf_discovery.crd_of(again) == "agains.g.example.com"
    assert kopf_discovery.without([again, other], "agains.g.example.com") == [other]
    assert kopf_discovery.serves([again, other], "agains.g.example.com")
    assert not kopf_discovery.serves([other], "agains.g.example.com")


class _Done(Exception):
    """Ends the CRD noticing loop of a test."""


def _follow(
    monkeypatch: pytest.MonkeyPatch,
    events: list[dict[str, Any]],
    scans: list[list[str]],
    settles: bool = False,
) -> list[Any]:
    """Run the noticing loop over one watch of ``events``, discovery answering ``scans`` in turn
    (then the last forever), until its next watch (and, if it ``settles``, until a scan lists
    what it waited for); the rescans it asked for, as (group, gone), and its watches' versions."""
    monkeypatch.setattr(kopf_discovery, "SETTLE_S", (0.01,) * 5)
    calls: list[Any] = []
    settled = asyncio.Event()

    async def current_version(resource: Any, settings: Any) -> str:
        return "1"

    async def changes(resource: Any, since: str, settings: Any) -> Any:
        calls.append(("watch", since))
        if since != "1":
            if settles:
                await asyncio.wait_for(settled.wait(), 2)
            raise _Done
        for event in events:
            yield event

    async def rescan(group: str | None, gone: str | None = None) -> list[references.Resource]:
        calls.append((group, gone))
        plurals = scans.pop(0) if len(scans) > 1 else scans[0]
        if len(scans) == 1 and plurals:
            settled.set()
        found = [_resource(str(group), p) for p in plurals]
        return found if gone is None else kopf_discovery.without(found, gone)

    monkeypatch.setattr(kopf_discovery, "_current_version", current_version)
    monkeypatch.setattr(kopf_discovery, "_changes", changes)
    settings = kopf.OperatorSettings()
    with contextlib.suppress(_Done, TimeoutError):
        asyncio.run(
            kopf_discovery._follow(kopf_discovery.references.CRDS, frozenset({"g"}), rescan, settings)
        )
    return calls


def _event(kind: str, name: str, version: str, **meta: Any) -> dict[str, Any]:
    return {"type": kind, "object": {"metadata": {"name": name, "resourceVersion": version, **meta}}}


def test_a_deleted_crd_s_resource_is_dropped_though_discovery_still_lists_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _follow(monkeypatch, [_event("DELETED", "agains.g", "5")], [["agains"], ["agains"]])
    # The start's scan, then the deletion's, then the next watch from the event's version.
    assert calls == [("g", None), ("watch", "1"), ("g", "agains.g"), ("watch", "5")]


def test_a_new_crd_is_scanned_again_until_discovery_lists_it(monkeypatch: pytest.MonkeyPatch) -> None:
    events = [
        _event("ADDED", "agains.g", "5"),
        _event("MODIFIED", "agains.g", "6"),
        _event("BOOKMARK", "", "7"),
    ]
    calls = _follow(monkeypatch, events, [[], [], [], [], [], ["agains"]], settles=True)
    scans = [c for c in calls if c[0] == "g"]
    # The start's scan, one per event (the first one's settling cancelled by the second event),
    # then scans with pauses until discovery lists it, and none after.
    assert scans == [("g", None)] * 6 and ("watch", "7") in calls, calls


def test_unwatched_groups_and_terminating_crds_start_no_settling(monkeypatch: pytest.MonkeyPatch) -> None:
    events = [
        _event("ADDED", "others.unwatched.example.com", "5"),
        _event("MODIFIED", "agains.g", "6", deletionTimestamp="2026-11-27T00:00:00Z"),
    ]
    calls = _follow(monkeypatch, events, [["x"], [], ["agains"]])
    assert calls == [("g", None), ("watch", "1"), ("g", None), ("watch", "6")], calls
