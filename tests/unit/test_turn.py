"""A turn of a resource is ``reconcile``'s: the kopf layer only translates."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from helm_operator.adapters.helm import HelmError
from helm_operator.runtime.reconcile import turn
from tests.unit.test_reconcile import FakeHelm, Storage, cr, runtime

PACKAGE = Path(__file__).resolve().parents[2] / "helm_operator"


def test_the_kopf_layer_only_translates() -> None:
    """``handlers.py`` decides and writes no status: the whole turn (release, day-2, drift, the one
    status patch) is ``reconcile.turn``'s; kopf's handlers turn its result into metrics and retries."""
    path = PACKAGE / "runtime" / "handlers.py"
    tree = ast.parse(path.read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imported & {
        "helm_operator.core.conditions",
        "helm_operator.release.status",
        "helm_operator.drift.check",
    }
    writes = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "status"
    ]
    assert writes == []


class _Reporter:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []
        self.events: list[tuple[str, str, str]] = []

    async def status(self, ref: Any, plural: str, patch: Any) -> bool:
        self.patches.append(dict(patch))
        return True

    async def events_(self, ref: Any, events: Any) -> None:
        self.events += [tuple(e) for e in events]


class _Drift:
    def seed_paused(self, owner: str, day2: Any) -> None:
        pass


def test_a_turn_returns_what_it_wrote_in_one_status_patch() -> None:
    """A failed install: one status patch (the release's conditions and failure memory) and its
    Events, written by the turn; the status returned is the one the API server now holds."""
    helm = FakeHelm(Storage(), fail=HelmError("HelmFailed", "the API server said no"))
    rt = runtime(helm)
    reporter = _Reporter()
    rt.reporter = SimpleNamespace(status=reporter.status, events=reporter.events_)  # type: ignore[assignment]
    rt.drift = _Drift()  # type: ignore[assignment]
    tracked: list[bool] = []
    done = asyncio.run(turn(rt, cr({"message": "x"}), lambda: tracked.append(True)))
    assert (done.result.outcome.phase, done.result.outcome.reason) == ("failed", "InstallFailed")
    assert len(reporter.patches) == 1 and not tracked  # no drift check of a release that failed
    ready = next(c for c in done.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InstallFailed")
    assert done.status["lastAttempt"]["reason"] == "InstallFailed"
    assert ("Warning", "InstallFailed", "the API server said no") in reporter.events
