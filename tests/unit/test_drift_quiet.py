"""When a resync may skip reading a release's objects: only while nothing could have changed them."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from helm_operator.config.watches import Watch
from helm_operator.core.locks import Concurrency
from helm_operator.core.naming import DRIFT_ANNOTATION
from helm_operator.drift.scheduler import DriftChecker, DriftScheduler

WATCH = Watch(group="g.io", version="v1", kind="Web", chart="charts/web")


def checker(healthy: dict[str, bool]) -> DriftChecker:
    dependents: Any = SimpleNamespace(healthy=lambda owner: healthy["now"])
    return DriftChecker(kube=None, reporter=None, dependents=dependents)  # type: ignore[arg-type]


def test_quiet_only_after_a_clean_check_and_while_the_watches_run() -> None:
    healthy = {"now": True}
    c = checker(healthy)
    assert not c.quiet(WATCH, "o", {})  # never checked
    c.clean.add("o")
    assert c.quiet(WATCH, "o", {})
    healthy["now"] = False  # a watch of one of its kinds broke: changes may have been missed
    assert not c.quiet(WATCH, "o", {})
    assert c.quiet(WATCH, "o", {DRIFT_ANNOTATION: "disabled"})  # nothing to check anyway
    healthy["now"] = True
    c.pause("o", "a restore runs")
    assert not c.quiet(WATCH, "o", {})
    c.pause("o", None)
    no_watches = Watch(group="g.io", version="v1", kind="Web", chart="c", watch_dependent_resources=False)
    assert not c.quiet(no_watches, "o", {})  # nothing would have told it of a change


def test_a_change_of_an_object_makes_the_next_resync_read_again() -> None:
    c = checker({"now": True})
    c.clean.add("o")
    scheduler = DriftScheduler(c, Concurrency())
    scheduler.poke("o")  # not tracked: no check runs, but what was clean is no longer known to be
    assert not c.quiet(WATCH, "o", {})


class _Recording(DriftScheduler):
    """The scheduler's decisions, with the check itself recorded instead of run."""

    def __init__(self, checker: DriftChecker) -> None:
        super().__init__(checker, Concurrency(), debounce=0.01)
        self.checks: list[tuple[str, bool]] = []

    async def _check(self, owner: str, full: bool = True) -> None:
        self.checks.append((owner, full))


def test_what_each_kind_of_change_runs() -> None:
    async def scenario() -> tuple[_Recording, DriftChecker]:
        c = checker({"now": True})
        s = _Recording(c)
        s.track(WATCH, "ns", "a")
        owner = next(iter(s.owners))
        c.clean.add(owner)
        s.poke(owner, "applied")  # Helm's own write: nothing to compare now, the next resync reads
        await asyncio.sleep(0.05)
        assert s.checks == [] and owner not in c.clean
        c.clean.add(owner)
        s.poke(owner, "readiness")  # a workload became ready: report it; the comparison still holds
        await asyncio.sleep(0.05)
        assert s.checks == [(owner, False)] and owner in c.clean
        s.poke(owner, "readiness")
        s.poke(owner, "changed")  # within one debounce: one check, in full
        await asyncio.sleep(0.05)
        assert s.checks[1:] == [(owner, True)] and owner not in c.clean
        return s, c

    s, _ = asyncio.run(scenario())
    assert not s._running and not s._due
