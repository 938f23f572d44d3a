"""Decide, purely, what a release is and what should happen to it.

One function decides the state (``determine_state``), one decides the action (``plan``). Both
take plain data read beforehand (Helm's storage, the CR's status), so every branch is unit-tested
without a cluster and a resync of an unchanged CR never starts ``helm``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from enum import StrEnum

MAX_RELEASE_NAME = 53
_VALID_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

OWNER_LABEL = "helm-operator.io/owner"
DIGEST_LABEL = "helm-operator.io/digest"

PENDING_STATUSES = frozenset({"pending-install", "pending-upgrade", "pending-rollback", "uninstalling"})


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
class StoredRelease:
    """The latest revision in Helm's storage, as read from the API (no ``helm`` process)."""

    name: str
    namespace: str
    revision: int
    status: str
    owner: str | None = None
    digest: str | None = None
    chart_name: str = ""
    chart_version: str = ""
    app_version: str = ""
    ever_deployed: bool = False
    manifest: str = field(default="", repr=False, compare=False)  # the rendered objects (YAML stream)


@dataclass(frozen=True)
class Attempts:
    """Failure memory kept in the CR status: consecutive failures for one digest."""

    digest: str | None = None
    failures: int = 0
    last_attempt: float = 0.0
    permanent: bool = False  # the failure cannot go away without a change (e.g. the chart fails to render)
    action: str | None = None
    reason: str | None = None


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


def owner_id(group: str, kind: str, namespace: str, name: str) -> str:
    """A label-safe identity of the CR that owns a release; stable across CR re-creation."""
    raw = f"{kind}.{group}/{namespace}/{name}"
    return hashlib.sha256(raw.encode()).hexdigest()[:40]


def release_name(cr_name: str) -> str:
    """The CR name made a valid Helm release name: DNS-1123 label, at most 53 characters.

    A name that is already valid is kept. Otherwise it is lower-cased, dots and other characters
    become ``-``, and a stable hash of the original is appended, so two CR names that clean up
    to the same text still get different releases.
    """
    if len(cr_name) <= MAX_RELEASE_NAME and _VALID_NAME.match(cr_name):
        return cr_name
    suffix = hashlib.sha256(cr_name.encode()).hexdigest()[:8]
    cleaned = re.sub(r"[^a-z0-9-]+", "-", cr_name.lower()).strip("-")
    head = cleaned[: MAX_RELEASE_NAME - len(suffix) - 1].rstrip("-")
    return f"{head}-{suffix}" if head else f"r-{suffix}"


def determine_state(release: StoredRelease | None, desired_digest: str, owner: str) -> ReleaseState:
    if release is None or release.status == "uninstalled":
        return ReleaseState.ABSENT
    if release.owner != owner:
        return ReleaseState.UNMANAGED
    if release.status in PENDING_STATUSES:
        return ReleaseState.LOCKED
    if release.status == "deployed":
        return ReleaseState.IN_SYNC if release.digest == desired_digest else ReleaseState.OUT_OF_SYNC
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
