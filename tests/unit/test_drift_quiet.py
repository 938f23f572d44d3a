"""When a resync may skip reading a release's objects: only while nothing could have changed them."""

from __future__ import annotations

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
