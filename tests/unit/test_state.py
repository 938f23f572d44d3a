from __future__ import annotations

import dataclasses
import re
from dataclasses import replace
from typing import Any

import pytest

from helm_operator.core.naming import DIGEST_LABEL, OWNER_LABEL, REVISION_LABEL, owner_id, release_name
from helm_operator.core.vocabulary import Reason
from helm_operator.release.attempts import Attempts, awaiting_tests
from helm_operator.release.outcome import Outcome
from helm_operator.release.record import StoredRelease, from_body, passed_its_tests
from helm_operator.release.state import (
    Action,
    Drift,
    ReleaseState,
    RetryPolicy,
    determine_state,
    plan,
    plan_drift,
)

OWNER = "o1"
DIGEST = "d1"


def rel(
    status: str = "deployed",
    owner: str | None = OWNER,
    digest: str = DIGEST,
    ever: bool = True,
    revision: int = 2,
) -> StoredRelease:
    return StoredRelease("r", "ns", revision, status, owner=owner, digest=digest, ever_deployed=ever)


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        (None, ReleaseState.ABSENT),
        (rel("uninstalled"), ReleaseState.ABSENT),
        (rel(owner=None), ReleaseState.UNMANAGED),
        (rel(owner="someone-else"), ReleaseState.UNMANAGED),
        (rel("pending-install"), ReleaseState.LOCKED),
        (rel("pending-upgrade"), ReleaseState.LOCKED),
        (rel("pending-rollback"), ReleaseState.LOCKED),
        (rel("uninstalling"), ReleaseState.LOCKED),
        (rel("failed"), ReleaseState.FAILED),
        (rel("deployed", digest="other"), ReleaseState.OUT_OF_SYNC),
        (rel("deployed"), ReleaseState.IN_SYNC),
    ],
)
def test_determine_state(release: StoredRelease | None, expected: ReleaseState) -> None:
    assert determine_state(release, DIGEST, OWNER) is expected


def test_a_revision_made_by_hand_is_out_of_sync_even_with_the_operators_labels() -> None:
    """``helm upgrade`` by hand copies the operator's labels (digest included) into its revision."""
    body: dict[str, object] = {"info": {"status": "deployed", "description": "Upgrade complete"}}
    labels = {OWNER_LABEL: OWNER, DIGEST_LABEL: DIGEST, REVISION_LABEL: "2"}

    def stored(revision: int, **info: str) -> StoredRelease:
        doc = {"info": {**body["info"], **info}}  # type: ignore[dict-item]
        return from_body(
            doc,
            name="r",
            namespace="ns",
            revision=revision,
            status="deployed",
            labels=labels,
            ever_deployed=True,
        )

    assert determine_state(stored(2), DIGEST, OWNER) is ReleaseState.IN_SYNC  # the operator's own
    assert determine_state(stored(3), DIGEST, OWNER) is ReleaseState.OUT_OF_SYNC  # made by hand
    # A rollback copies the target's labels too; whether it is wanted is the digest's to say.
    assert determine_state(stored(3, description="Rollback to 2"), DIGEST, OWNER) is ReleaseState.IN_SYNC
    # Stamped higher than Helm numbered it (an install over a kept history): still the operator's.
    assert determine_state(stored(1), DIGEST, OWNER) is ReleaseState.IN_SYNC
    # Releases from before the stamp existed carry none.
    unstamped = {k: v for k, v in labels.items() if k != REVISION_LABEL}
    old = from_body(
        body, name="r", namespace="ns", revision=7, status="deployed", labels=unstamped, ever_deployed=True
    )
    assert determine_state(old, DIGEST, OWNER) is ReleaseState.IN_SYNC


def test_every_state_is_covered_by_the_table() -> None:
    # A new state must come with its rule and a row above.
    assert {s.value for s in ReleaseState} == {
        "Absent",
        "OutOfSync",
        "Locked",
        "Failed",
        "Unmanaged",
        "InSync",
        "Drifted",
        "Untested",
    }


@pytest.mark.parametrize(
    ("release", "drift", "expected"),
    [
        (rel(), Drift("enabled", objects=2), ReleaseState.DRIFTED),
        (rel(), Drift("warn", objects=1), ReleaseState.DRIFTED),
        (rel(), Drift("enabled", objects=0), ReleaseState.IN_SYNC),  # compared: nothing differs
        (rel(), Drift("disabled"), ReleaseState.IN_SYNC),  # not compared
        (rel(), None, ReleaseState.IN_SYNC),
        # A release that needs Helm is decided by what Helm must do; its objects come after.
        (rel(digest="other"), Drift("enabled", objects=2), ReleaseState.OUT_OF_SYNC),
        (rel("failed"), Drift("enabled", objects=2), ReleaseState.FAILED),
        (rel(owner="someone-else"), Drift("enabled", objects=2), ReleaseState.UNMANAGED),
        (None, Drift("enabled", objects=2), ReleaseState.ABSENT),
    ],
)
def test_drift_is_a_state_of_a_release_in_sync(
    release: StoredRelease | None, drift: Drift | None, expected: ReleaseState
) -> None:
    assert determine_state(release, DIGEST, OWNER, drift) is expected


@pytest.mark.parametrize(
    ("drift", "expected"),
    [
        (Drift("enabled", objects=2), Action.CORRECT_DRIFT),
        (Drift("warn", objects=2), Action.NOTHING),  # reported, not corrected
        (Drift("enabled", objects=2, paused="a restore runs"), Action.NOTHING),
        (Drift("enabled", objects=0), Action.NOTHING),
        (Drift("disabled"), Action.NOTHING),
    ],
)
def test_what_is_done_about_drift(drift: Drift, expected: Action) -> None:
    """One decision for a reconcile (``plan`` of ``DRIFTED``) and a dependent watch's check
    (``plan_drift``)."""
    assert plan_drift(drift).action is expected
    state = determine_state(rel(), DIGEST, OWNER, drift)
    p = plan(state, rel(), DIGEST, NO_ATTEMPTS, now=0.0, rollback_on_failure=True, drift=drift)
    assert p.action is expected
    if state is ReleaseState.DRIFTED:
        assert p == plan_drift(drift)


def test_a_release_that_must_pass_its_tests_is_tested_before_anything_else_of_it() -> None:
    """Flux's rule: an untested release is tested (a staged rollout's wave gated on ``helm test``);
    a failed test is retried with the backoff of any failure and given up on the same way."""
    untested = replace(rel(), tested=False)
    assert determine_state(untested, DIGEST, OWNER) is ReleaseState.IN_SYNC, "no test asked for"
    state = determine_state(untested, DIGEST, OWNER, Drift("enabled", objects=2), test=True)
    assert state is ReleaseState.UNTESTED, "tested before its drift is corrected"
    assert determine_state(rel(), DIGEST, OWNER, test=True) is ReleaseState.IN_SYNC  # passed
    assert (
        determine_state(replace(untested, digest="other"), DIGEST, OWNER, test=True)
        is ReleaseState.OUT_OF_SYNC
    )
    first = plan(state, untested, DIGEST, NO_ATTEMPTS, now=0.0, rollback_on_failure=False)
    assert first.action is Action.TEST and f"revision {untested.revision}" in first.reason
    failed = Attempts(DIGEST, 1, last_attempt=100.0, action="test", reason="TestFailed")
    waits = plan(state, untested, DIGEST, failed, now=101.0, rollback_on_failure=False)
    assert waits.action is Action.WAIT and "retrying test" in waits.reason
    many = replace(failed, failures=5)
    assert plan(state, untested, DIGEST, many, now=1e9, rollback_on_failure=False).action is Action.GIVE_UP


def test_a_revision_says_whether_its_passed_its_tests_as_helm_recorded_them() -> None:
    def hook(events: list[str], phase: str | None) -> dict[str, Any]:
        return {"name": "h", "events": events, **({"last_run": {"phase": phase}} if phase else {})}

    assert passed_its_tests([])  # no test hooks: nothing to fail
    assert passed_its_tests([hook(["post-install"], None)])
    assert not passed_its_tests([hook(["test"], None)]), "never run"
    assert not passed_its_tests([hook(["test"], "Succeeded"), hook(["test-success"], "Failed")])
    assert passed_its_tests([hook(["test"], "Succeeded"), hook(["post-upgrade"], "Failed")])


def test_a_paused_correction_says_why() -> None:
    assert "a failover runs" in plan_drift(Drift("enabled", 1, paused="a failover runs")).reason
    assert "'warn'" in plan_drift(Drift("warn", 1)).reason


def test_a_drift_correction_runs_no_helm_and_helm_actions_do() -> None:
    """What the action runner does around an action (hooks, progress, the drain, an outcome
    Event) follows from whether it runs Helm."""
    assert not Action.CORRECT_DRIFT.helm
    assert {a for a in Action if a.helm} == {
        Action.INSTALL,
        Action.UPGRADE,
        Action.ROLLBACK,
        Action.REINSTALL,
        Action.TEST,  # no new revision, but helm runs: announced, held by a drain, told by an Event
    }


NO_ATTEMPTS = Attempts()


def _plan(
    state: ReleaseState,
    release: StoredRelease | None,
    attempts: Attempts = NO_ATTEMPTS,
    now: float = 1000.0,
    rollback: bool = True,
) -> Action:
    return plan(state, release, DIGEST, attempts, now=now, rollback_on_failure=rollback).action


def test_plan_basic_actions() -> None:
    assert _plan(ReleaseState.ABSENT, None) is Action.INSTALL
    assert _plan(ReleaseState.OUT_OF_SYNC, rel(digest="old")) is Action.UPGRADE
    assert _plan(ReleaseState.IN_SYNC, rel()) is Action.NOTHING
    assert _plan(ReleaseState.UNMANAGED, rel(owner=None)) is Action.NOTHING
    assert _plan(ReleaseState.LOCKED, rel("pending-upgrade")) is Action.UNLOCK


def test_plan_failed_release() -> None:
    never = rel("failed", ever=False, revision=1)
    assert _plan(ReleaseState.FAILED, never) is Action.REINSTALL
    assert _plan(ReleaseState.FAILED, rel("failed")) is Action.ROLLBACK
    assert _plan(ReleaseState.FAILED, rel("failed"), rollback=False) is Action.UPGRADE
    # The spec changed since the failure: try the new values instead of rolling back.
    assert _plan(ReleaseState.FAILED, rel("failed", digest="old")) is Action.UPGRADE


def test_an_interrupted_upgrade_goes_straight_to_the_desired_release() -> None:
    # Unlocked after its writer was killed: nothing was wrong with it, so no rollback first.
    interrupted = StoredRelease(
        "r", "ns", 3, "failed", owner=OWNER, digest=DIGEST, ever_deployed=True, interrupted=True
    )
    assert _plan(ReleaseState.FAILED, interrupted) is Action.UPGRADE
    first = StoredRelease("r", "ns", 1, "failed", owner=OWNER, digest=DIGEST, interrupted=True)
    assert _plan(ReleaseState.FAILED, first) is Action.REINSTALL


def test_backoff_is_capped_exponential() -> None:
    policy = RetryPolicy(base=5, cap=60, max_failures=10)
    assert [policy.delay(n) for n in range(0, 7)] == [0, 5, 10, 20, 40, 60, 60]


def test_plan_waits_then_retries_then_gives_up() -> None:
    policy = RetryPolicy(base=10, cap=100, max_failures=3)
    failed_twice = Attempts(DIGEST, failures=2, last_attempt=1000.0)
    p = plan(
        ReleaseState.OUT_OF_SYNC,
        rel(digest="old"),
        DIGEST,
        failed_twice,
        now=1005.0,
        rollback_on_failure=True,
        policy=policy,
    )
    assert p.action is Action.WAIT and p.delay == pytest.approx(15.0)
    p = plan(
        ReleaseState.OUT_OF_SYNC,
        rel(digest="old"),
        DIGEST,
        failed_twice,
        now=1021.0,
        rollback_on_failure=True,
        policy=policy,
    )
    assert p.action is Action.UPGRADE
    exhausted = Attempts(DIGEST, failures=3, last_attempt=0.0)
    p = plan(
        ReleaseState.OUT_OF_SYNC,
        rel(digest="old"),
        DIGEST,
        exhausted,
        now=1e9,
        rollback_on_failure=True,
        policy=policy,
    )
    assert p.action is Action.GIVE_UP
    # Failures for other values do not hold back new values.
    other = Attempts("old-digest", failures=3, last_attempt=1000.0)
    assert _plan(ReleaseState.OUT_OF_SYNC, rel(digest="old"), other) is Action.UPGRADE


@pytest.mark.parametrize(
    "name",
    [
        "my-db",
        "a" * 53,
        "a" * 60,
        "my.dotted.name",
        "Upper.Case_Name",
        "x" * 40 + "." + "y" * 19,
        "..--..",
        "ends-with-dash-" + "z" * 50,
    ],
)
def test_release_name_is_valid_and_stable(name: str) -> None:
    out = release_name(name)
    assert len(out) <= 53
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", out)
    assert release_name(name) == out


def test_release_name_keeps_valid_names_and_separates_collisions() -> None:
    assert release_name("my-db") == "my-db"
    assert release_name("a.b") != release_name("a-b")
    assert release_name("a" * 60) != release_name("a" * 61)


def test_owner_id_is_label_safe_and_distinct() -> None:
    a = owner_id("g", "K", "ns", "n")
    assert re.fullmatch(r"[0-9a-f]{40}", a)
    assert a != owner_id("g", "K", "ns2", "n")


def test_permanent_failure_is_not_retried_until_values_change() -> None:
    permanent = Attempts(DIGEST, failures=1, last_attempt=0.0, permanent=True)
    assert _plan(ReleaseState.ABSENT, None, permanent, now=1e9) is Action.GIVE_UP
    assert _plan(ReleaseState.OUT_OF_SYNC, rel(digest="old"), permanent) is Action.GIVE_UP
    changed = Attempts("another", failures=1, last_attempt=0.0, permanent=True)
    assert _plan(ReleaseState.ABSENT, None, changed) is Action.INSTALL


def test_a_rollback_backs_off_and_a_permanent_failure_is_given_up_on() -> None:
    """A remediation is a try of these values: not repeated at every resync."""
    failed = rel("failed")
    permanent = Attempts(DIGEST, failures=1, last_attempt=1000.0, permanent=True)
    assert _plan(ReleaseState.FAILED, failed, permanent, now=5000.0) is Action.GIVE_UP
    once = Attempts(DIGEST, failures=1, last_attempt=1000.0)
    assert _plan(ReleaseState.FAILED, failed, once, now=1001.0) is Action.WAIT
    assert _plan(ReleaseState.FAILED, failed, once, now=5000.0) is Action.ROLLBACK
    many = Attempts(DIGEST, failures=RetryPolicy().max_failures, last_attempt=1000.0)
    assert _plan(ReleaseState.FAILED, failed, many, now=5000.0) is Action.GIVE_UP


def test_a_change_whose_tests_run_next_is_in_progress_and_a_retry_says_why_the_last_try_failed() -> None:
    applied = Outcome(
        "ready", Reason.UPGRADE_SUCCEEDED, "upgraded to revision 4", action="upgrade", digest="d2"
    )
    first = awaiting_tests(applied, Attempts(), "d2")
    assert (first.phase, first.reason) == ("progressing", Reason.TEST_PENDING)
    assert first.message == "upgraded to revision 4; its tests run next"
    failed_twice = Attempts("d2", 2, 0.0, False, "test", "TestFailed")
    retry = awaiting_tests(applied, failed_twice, "d2")
    assert retry.message == "upgraded to revision 4; its tests run next (try 3; the last failed: TestFailed)"
    # Failures of another change (an earlier spec) are not this change's.
    other = awaiting_tests(applied, dataclasses.replace(failed_twice, digest="d1"), "d2")
    assert other.message == first.message
