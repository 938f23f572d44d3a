"""Decide, purely, what a release is and what should happen to it.

One function decides the state (``determine_state``), one decides the action (``plan``). Both
take plain data read beforehand (Helm's storage, the CR's status, what a comparison of the live
objects found), so every branch is unit-tested without a cluster and a resync of an unchanged CR
never starts ``helm``. Drift is one more state: a deployed, in-sync release whose live objects
differ is ``DRIFTED``, and re-asserting them (``CORRECT_DRIFT``) is one more action.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from helm_operator.release.attempts import Attempts
from helm_operator.release.record import PENDING_STATUSES, StoredRelease


class ReleaseState(StrEnum):
    ABSENT = "Absent"
    OUT_OF_SYNC = "OutOfSync"
    LOCKED = "Locked"
    FAILED = "Failed"
    UNMANAGED = "Unmanaged"
    IN_SYNC = "InSync"
    UNTESTED = "Untested"  # in sync, and its chart's tests have not passed where they must
    DRIFTED = "Drifted"  # in sync with the desired release, but live objects differ from it


class Action(StrEnum):
    INSTALL = "install"
    UPGRADE = "upgrade"
    UNLOCK = "unlock"
    ROLLBACK = "rollback"
    REINSTALL = "reinstall"  # a failed first install: uninstall the debris, install again
    NOTHING = "nothing"
    WAIT = "wait"  # a retry is due, but not yet (backoff)
    GIVE_UP = "give-up"  # retries for this digest are exhausted until the CR changes
    CORRECT_DRIFT = "correct-drift"  # re-assert the drifted live objects: no Helm, no new revision
    TEST = "test"  # run the chart's test hooks (`helm test`): no new revision

    @property
    def helm(self) -> bool:
        """Whether the action runs Helm (a new revision): hooks around it, its progress announced,
        held back while the operator drains, its outcome told by an Event."""
        return self in _HELM_ACTIONS


_HELM_ACTIONS = frozenset({Action.INSTALL, Action.UPGRADE, Action.ROLLBACK, Action.REINSTALL, Action.TEST})
DRIFT_MODES = ("enabled", "warn", "disabled")


@dataclass(frozen=True)
class Drift:
    """What the last comparison of a release's live objects found, as the decision needs it."""

    mode: str  # enabled: correct | warn: report only | disabled: not compared
    objects: int = 0  # how many objects differ from the release
    paused: str | None = None  # why a day-2 hook paused correction (a restore, a failover)


@dataclass(frozen=True)
class RetryPolicy:
    base: float = 5.0
    cap: float = 300.0
    max_failures: int = 5

    def delay(self, failures: int) -> float:
        """Capped exponential backoff after ``failures`` consecutive failures."""
        if failures <= 0:
            return 0.0
        return float(min(self.cap, self.base * 2 ** (failures - 1)))


def determine_state(
    release: StoredRelease | None,
    desired_digest: str,
    owner: str,
    drift: Drift | None = None,
    test: bool = False,
) -> ReleaseState:
    """``drift``: what a comparison of the live objects found (None: not compared); ``test``: the
    release must have passed its chart's tests (a staged rollout's wave gated on them)."""
    if release is None or release.status == "uninstalled":
        return ReleaseState.ABSENT
    if release.owner != owner:
        return ReleaseState.UNMANAGED
    if release.status in PENDING_STATUSES:
        return ReleaseState.LOCKED
    if release.status == "deployed":
        in_sync = release.digest == desired_digest and not release.by_hand
        if not in_sync:
            return ReleaseState.OUT_OF_SYNC
        if test and not release.tested:
            return ReleaseState.UNTESTED
        return ReleaseState.DRIFTED if drift is not None and drift.objects else ReleaseState.IN_SYNC
    return ReleaseState.FAILED


@dataclass(frozen=True)
class Plan:
    action: Action
    reason: str
    delay: float = 0.0


def plan(
    state: ReleaseState,
    release: StoredRelease | None,
    desired_digest: str,
    attempts: Attempts,
    *,
    now: float,
    rollback_on_failure: bool,
    policy: RetryPolicy = RetryPolicy(),
    drift: Drift | None = None,
) -> Plan:
    """Choose the next action for a state; apply backoff to actions that failed before."""
    match state:
        case ReleaseState.IN_SYNC:
            return Plan(Action.NOTHING, "release matches the desired chart and values")
        case ReleaseState.DRIFTED:
            assert drift is not None
            return plan_drift(drift)
        case ReleaseState.UNMANAGED:
            return Plan(Action.NOTHING, "a release of this name exists and is not managed by this resource")
        case ReleaseState.LOCKED:
            assert release is not None
            return Plan(Action.UNLOCK, f"release is stuck in {release.status} (its writer is gone)")
        case ReleaseState.ABSENT:
            candidate = Plan(Action.INSTALL, "release does not exist")
        case ReleaseState.OUT_OF_SYNC:
            candidate = Plan(Action.UPGRADE, "chart or values changed")
        case ReleaseState.UNTESTED:
            assert release is not None
            candidate = Plan(
                Action.TEST, f"the chart's tests have not passed for revision {release.revision}"
            )
        case ReleaseState.FAILED:
            assert release is not None
            if not release.ever_deployed:
                candidate = Plan(Action.REINSTALL, "the first install failed; cleaning up and retrying")
            elif release.interrupted:
                # Its writer died mid-upgrade: nothing was wrong with the release itself, so go
                # straight to the desired one (one new revision) rather than roll back first.
                return Plan(
                    Action.UPGRADE, "the last upgrade was interrupted; upgrading to the desired values"
                )
            elif rollback_on_failure and release.digest == desired_digest:
                # A remediation counts as a try of these values: it backs off, and a failure
                # that is permanent (or tried too often) is given up on, not retried every resync.
                candidate = Plan(
                    Action.ROLLBACK, "the last upgrade failed; rolling back to the last good revision"
                )
            else:
                candidate = Plan(Action.UPGRADE, "the last upgrade failed; retrying with the desired values")

    if attempts.digest == desired_digest and attempts.failures > 0:
        if attempts.permanent:
            return Plan(
                Action.GIVE_UP, "the last attempt with these values failed permanently; change the resource"
            )
        if attempts.failures >= policy.max_failures:
            return Plan(
                Action.GIVE_UP,
                f"{attempts.failures} consecutive failures for these values; change the resource to retry",
            )
        wait = attempts.last_attempt + policy.delay(attempts.failures) - now
        if wait > 0:
            return Plan(Action.WAIT, f"retrying {candidate.action} after a failure", delay=wait)
    return candidate


def plan_drift(drift: Drift) -> Plan:
    """What to do about live objects that differ from the deployed release (``plan``'s answer for
    ``DRIFTED``; a dependent watch's check asks it directly): re-assert them, unless the drift mode
    only reports or a day-2 hook paused correction."""
    if not drift.objects:
        return Plan(Action.NOTHING, "live objects match the deployed release")
    if drift.paused:
        return Plan(Action.NOTHING, f"drift correction is paused: {drift.paused}")
    if drift.mode != "enabled":
        return Plan(Action.NOTHING, f"drift mode is {drift.mode!r}: drift is reported, not corrected")
    return Plan(Action.CORRECT_DRIFT, f"{drift.objects} live object(s) differ from the deployed release")
