"""A dependent watch's drift check decides its correction the way a reconcile does
(``release.state.plan_drift``, the rule ``plan`` applies to a drifted release)."""

from __future__ import annotations

import asyncio
from typing import Any

from helm_operator.config.watches import Watch
from helm_operator.core.locks import Concurrency
from helm_operator.drift.check import DriftReport
from helm_operator.drift.diff import ObjectDrift
from helm_operator.drift.scheduler import Announce, DriftChecker, DriftScheduler
from helm_operator.release.identity import ReleaseId

WATCH = Watch(group="g.io", version="v1", kind="Web", chart="charts/web", plural="webs", scope="Namespaced")
DRIFT = ObjectDrift("v1", "ConfigMap", "ns", "web", paths=("/data/a",))


class _Kube:
    def __init__(self, day2: dict[str, Any]) -> None:
        self.day2 = day2

    def get_custom(self, ref: Any, plural: str) -> dict[str, Any]:
        meta = {"name": "a", "namespace": "ns", "uid": "u", "generation": 1, "annotations": {}}
        return {"metadata": meta, "status": {"conditions": [], "day2": self.day2}}


class _Reporter:
    def __init__(self) -> None:
        self.patches: list[Any] = []
        self.events: list[Any] = []

    async def status(self, ref: Any, plural: str, patch: Any) -> bool:
        self.patches.append(patch)
        return True

    async def compose(self, ref: Any, plural: str, patch_of: Any, read: Any = None) -> bool:
        patch = patch_of({"metadata": {"resourceVersion": "1"}, "status": {"conditions": []}})
        if patch:
            self.patches.append(patch)
        return True

    async def events_(self, ref: Any, events: Any) -> None:
        self.events += list(events)


class _Checker(DriftChecker):
    """Finds ``found``; records corrections instead of applying them."""

    found: DriftReport | None = None
    corrections: list[DriftReport]

    async def observe(self, watch: Watch, ident: ReleaseId, annotations: Any) -> DriftReport | None:
        return None if self.paused.get(ident.owner) else self.found

    async def correct(self, watch: Watch, report: DriftReport, announce: Announce | None) -> DriftReport:
        self.corrections.append(report)
        return DriftReport(report.mode, report.drifts, corrected=True)


def _check(found: DriftReport, day2: dict[str, Any] | None = None) -> tuple[_Checker, _Reporter]:
    reporter = _Reporter()
    rep: Any = type(
        "R", (), {"status": reporter.status, "compose": reporter.compose, "events": reporter.events_}
    )()
    checker = _Checker(kube=_Kube(day2 or {}), reporter=rep)  # type: ignore[arg-type]
    checker.found, checker.corrections = found, []
    scheduler = DriftScheduler(checker, Concurrency())

    async def run() -> None:
        scheduler.track(WATCH, "ns", "a")
        await scheduler._check(next(iter(scheduler.owners)), full=True)

    asyncio.run(run())
    return checker, reporter


def test_a_watch_check_corrects_only_what_the_decision_says() -> None:
    checker, reporter = _check(DriftReport("enabled", (DRIFT,)))
    assert len(checker.corrections) == 1
    assert [e.reason for e in reporter.events] == ["DriftCorrected"]
    checker, reporter = _check(DriftReport("warn", (DRIFT,)))
    assert checker.corrections == []
    assert [e.reason for e in reporter.events] == ["DriftDetected"]
    checker, reporter = _check(DriftReport("enabled"))
    assert checker.corrections == [] and reporter.events == []


def test_a_paused_release_is_neither_compared_nor_corrected() -> None:
    checker, reporter = _check(DriftReport("enabled", (DRIFT,)), {"driftPaused": "a restore runs"})
    assert checker.corrections == [] and reporter.patches == [] and reporter.events == []
