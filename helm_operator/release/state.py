"""Decide, purely, what a release is and what should happen to it.

One function decides the state (``determine_state``), one decides the action (``plan``). Both
take plain data read beforehand (Helm's storage, the CR's status), so every branch is unit-tested
without a cluster and a resync of an unchanged CR never starts ``helm``.
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


class Action(StrEnum):
    INSTALL = "install"
    UPGRADE = "upgrade"
    UNLOCK = "unlock"
    ROLLBACK = "rollback"
    REINSTALL = "reinstall"  # a failed first install: uninstall the debris, install again
    NOTHING = "nothing"
    WAIT = "wait"  # a retry is due, but not yet (backoff)
    GIVE_UP = "give-up"  # retries for this digest are exhausted until the CR changes


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


def determine_state(release: StoredRelease | None, desired_digest: str, owner: str) -> ReleaseState:
    if release is None or release.status == "uninstalled":
        return ReleaseState.ABSENT
    if release.owner != owner:
        return ReleaseState.UNMANAGED
    if release.status in PENDING_STATUSES:
        return ReleaseState.LOCKED
    if release.status == "deployed":
        in_sync = release.digest == desired_digest and not release.by_hand
        return ReleaseState.IN_SYNC if in_sync else ReleaseState.OUT_OF_SYNC
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
) -> Plan:
    """Choose the next action for a state; apply backoff to actions that failed before."""
    match state:
        case ReleaseState.IN_SYNC:
            return Plan(Action.NOTHING, "release matches the desired chart and values")
        case ReleaseState.UNMANAGED:
            return Plan(Action.NOTHING, "a release of this name exists and is not managed by this resource")
        case ReleaseState.LOCKED:
            assert release is not None
            return Plan(Action.UNLOCK, f"release is stuck in {release.status} (its writer is gone)")
        case ReleaseState.ABSENT:
            candidate = Plan(Action.INSTALL, "release does not exist")
        case ReleaseState.OUT_OF_SYNC:
            candidate = Plan(Action.UPGRADE, "chart or values changed")
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
                return Plan(
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
