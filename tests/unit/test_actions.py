"""The act → report layer with small fakes of helm and of Helm's storage (no cluster needed).

The fakes stand for the adapters' contracts only: ``FakeHelm`` raises the classified ``HelmError``
the real adapter raises; ``FakeCore`` serves release Secrets encoded as Helm stores them, so the
real storage decoding runs. The e2e tests remain the truth for helm itself.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from helm_operator.adapters.helm import Applied, HelmAborted, HelmError
from helm_operator.adapters.storage import encode_release
from helm_operator.config.charts import ChartRef
from helm_operator.config.watches import Watch
from helm_operator.release.attempts import Attempts
from helm_operator.release.identity import ReleaseId
from helm_operator.release.state import Action, RetryPolicy
from helm_operator.runtime.desired import Target
from helm_operator.runtime.reconcile import _report
from helm_operator.runtime.release_actions import ACTIONS, ActionContext

CHART = ChartRef("tiny", Path("/charts/tiny"))
WATCH = Watch("g", "v1", "Tiny", CHART, "tinies", "Namespaced")
TARGET = Target(WATCH, ReleaseId("r", "ns", "owner-1"), "digest-1", {"a": 1}, CHART)


class FakeCore:
    """Serves Helm's release Secrets for one release, as the API returns them."""

    def __init__(self) -> None:
        self.revisions: list[tuple[int, str]] = []
        self.hooks: dict[int, list[dict[str, Any]]] = {}  # a revision's hooks, as Helm records them

    def list_namespaced_secret(self, namespace: str, label_selector: str) -> Any:
        items = []
        for rev, status in self.revisions:
            body = {"info": {"status": status}, "chart": {"metadata": {"name": "tiny", "version": "0.1.0"}}}
            body["hooks"] = self.hooks.get(rev, [])
            labels = {"version": str(rev), "status": status, "helm-operator.io/owner": "owner-1"}
            items.append(
                SimpleNamespace(
                    metadata=SimpleNamespace(labels=labels, name=f"sh.helm.release.v1.r.v{rev}"),
                    data={"release": encode_release(body)},
                )
            )
        return SimpleNamespace(items=items)


@dataclass
class FakeHelm:
    core: FakeCore
    fail: dict[str, HelmError | HelmAborted] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    rolled_back_to: list[int | None] = field(default_factory=list)

    def _maybe_fail(self, op: str) -> None:
        self.calls.append(op)
        if op in self.fail:
            raise self.fail[op]

    async def install_or_upgrade(self, *args: Any, **kwargs: Any) -> Applied:
        rev = len(self.core.revisions) + 1
        self.core.revisions = [(r, "superseded") for r, _ in self.core.revisions]
        self.core.revisions.append((rev, "failed"))
        self._maybe_fail("upgrade")
        self.core.revisions[-1] = (rev, "deployed")
        return Applied({})

    async def rollback(self, name: str, namespace: str, revision: int | None, **kwargs: Any) -> None:
        self._maybe_fail("rollback")
        self.rolled_back_to.append(revision)
        rev = len(self.core.revisions) + 1
        self.core.revisions = [(r, "superseded") for r, _ in self.core.revisions] + [(rev, "deployed")]

    async def test(self, *args: Any, **kwargs: Any) -> None:
        self._maybe_fail("test")

    async def uninstall(self, *args: Any, **kwargs: Any) -> bool:
        self._maybe_fail("uninstall")
        self.core.revisions = []
        return True


def act(action: Action, helm: FakeHelm, before_revisions: list[tuple[int, str]] | None = None) -> Any:
    helm.core.revisions = list(before_revisions or [])
    kube: Any = SimpleNamespace(core=helm.core)
    from helm_operator.adapters.storage import latest_release

    before = latest_release(helm.core, "r", "ns")  # type: ignore[arg-type]
    ctx = ActionContext(helm, kube, TARGET, before, {})  # type: ignore[arg-type]
    return asyncio.run(ACTIONS[action](ctx))


def test_install_succeeds_and_records_the_revision() -> None:
    out = act(Action.INSTALL, FakeHelm(FakeCore()))
    assert (out.phase, out.reason, out.release.revision, out.remediation) == (
        "ready",
        "InstallSucceeded",
        1,
        None,
    )


def test_a_failed_install_is_cleaned_up_and_a_failed_cleanup_is_said_so() -> None:
    helm = FakeHelm(FakeCore(), {"upgrade": HelmError("HelmFailed", "boom")})
    out = act(Action.INSTALL, helm)
    assert (out.phase, out.reason, helm.calls) == ("failed", "InstallFailed", ["upgrade", "uninstall"])
    assert out.remediation.reason == "CleanedUp" and out.remediation.succeeded
    helm = FakeHelm(
        FakeCore(), {"upgrade": HelmError("HelmFailed", "boom"), "uninstall": HelmError("HelmFailed", "no")}
    )
    out = act(Action.INSTALL, helm)
    assert (out.remediation.reason, out.remediation.succeeded) == ("CleanupFailed", False)
    assert "no" in out.remediation.message


@pytest.mark.parametrize(
    "reason", ["RenderFailed", "NamespaceViolation", "ClusterScopedNotAllowed", "ReleaseTooLarge"]
)
def test_permanent_failures_stall_without_cleanup(reason: str) -> None:
    helm = FakeHelm(FakeCore(), {"upgrade": HelmError(reason, "why")})
    out = act(Action.INSTALL, helm)
    assert (out.phase, out.reason, out.permanent, helm.calls) == ("stalled", reason, True, ["upgrade"])


def test_a_failed_upgrade_rolls_back_and_reports_how_that_went() -> None:
    deployed = [(1, "deployed")]
    helm = FakeHelm(FakeCore(), {"upgrade": HelmError("HelmFailed", "invalid")})
    out = act(Action.UPGRADE, helm, deployed)
    assert (out.reason, helm.calls, out.remediation.reason) == (
        "UpgradeFailed",
        ["upgrade", "rollback"],
        "RolledBack",
    )
    helm = FakeHelm(
        FakeCore(), {"upgrade": HelmError("HelmFailed", "x"), "rollback": HelmError("Timeout", "slow")}
    )
    out = act(Action.UPGRADE, helm, deployed)
    assert (out.remediation.reason, out.remediation.succeeded) == ("RollbackFailed", False)


def test_a_revision_that_failed_its_tests_goes_back_to_the_one_before_it_never_to_itself() -> None:
    """The tested revision is the deployed one: a rollback to it would deploy the failed change
    again and look finished."""
    helm = FakeHelm(FakeCore(), {"test": HelmError("HelmFailed", "Job Failed")})
    out = act(Action.TEST, helm, [(1, "superseded"), (2, "failed"), (3, "deployed")])
    assert (out.reason, helm.calls, helm.rolled_back_to) == ("TestFailed", ["test", "rollback"], [1])
    assert out.remediation.message == "rolled back to revision 1" and out.remediation.succeeded
    assert out.message.startswith("revision 3: helm test failed: Job Failed")
    # The first revision that ran failed its tests: nothing to go back to, no rollback.
    helm = FakeHelm(FakeCore(), {"test": HelmError("HelmFailed", "Job Failed")})
    out = act(Action.TEST, helm, [(1, "deployed")])
    assert (out.reason, helm.calls, out.remediation) == ("TestFailed", ["test"], None)


def test_a_release_read_back_from_storage_says_whether_it_passed_its_tests() -> None:
    """Not only the record an upgrade printed: the storage's (a later turn, a restarted operator)."""
    from helm_operator.adapters.storage import latest_release

    core = FakeCore()
    core.revisions = [(1, "deployed")]
    check = {"name": "check", "kind": "Job", "events": ["test"], "manifest": "x" * 1000}
    for phase, tested in ((None, False), ("Failed", False), ("Succeeded", True)):
        core.hooks[1] = [{**check, **({"last_run": {"phase": phase}} if phase else {})}]
        core.hooks[1].append({"name": "migrate", "events": ["pre-upgrade"], "last_run": {"phase": "Failed"}})
        release = latest_release(core, "r", "ns")  # type: ignore[arg-type]
        assert release is not None and release.tested is tested, phase


def test_an_aborted_action_is_neither_a_failure_nor_retried() -> None:
    helm = FakeHelm(FakeCore(), {"upgrade": HelmAborted("deleting")})
    out = act(Action.UPGRADE, helm, [(1, "deployed")])
    assert (out.phase, out.reason, helm.calls) == ("progressing", "Cancelled", ["upgrade"])
    rt: Any = SimpleNamespace(attempts={}, retry=RetryPolicy())
    result = _report(rt, "ns/r", Attempts(), out, [], "ctx")
    assert result.retry_after is None and result.attempts == Attempts()


def test_reinstall_removes_the_debris_first() -> None:
    helm = FakeHelm(FakeCore())
    out = act(Action.REINSTALL, helm, [(1, "failed")])
    assert (out.reason, helm.calls, out.release.revision) == ("InstallSucceeded", ["uninstall", "upgrade"], 1)


def test_report_counts_failures_backs_off_and_posts_the_remediation() -> None:
    helm = FakeHelm(
        FakeCore(), {"upgrade": HelmError("HelmFailed", "x"), "rollback": HelmError("HelmFailed", "y")}
    )
    out = act(Action.UPGRADE, helm, [(1, "deployed")])
    rt: Any = SimpleNamespace(attempts={}, retry=RetryPolicy(base=5, cap=60))
    first = _report(rt, "ns/r", Attempts(), out, [], "ctx")
    assert first.retry_after == 5 and first.attempts is not None and first.attempts.failures == 1
    assert [(t, r) for t, r, _ in first.events] == [
        ("Warning", "UpgradeFailed"),
        ("Warning", "RollbackFailed"),
    ]
    second = _report(rt, "ns/r", first.attempts, out, [], "ctx")
    assert second.retry_after == 10 and rt.attempts["ns/r"].failures == 2
