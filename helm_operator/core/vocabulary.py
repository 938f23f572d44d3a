"""What the status and Events say, as types: condition types, the operator's own reasons, and
typed condition and Event values.

The enums are ``StrEnum`` so they serialise exactly as the strings users (and ``kubectl wait``)
see. Reasons that come from elsewhere (Helm's error classes, a hook's result) stay plain strings,
so a reason field is ``str``; every reason the operator decides itself is a ``Reason``.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import NamedTuple


class ConditionType(StrEnum):
    READY = "Ready"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"
    RELEASED = "Released"
    REMEDIATED = "Remediated"
    DRIFTED = "Drifted"
    DAY2 = "Day2"


class Reason(StrEnum):
    """The reasons the operator decides itself (conditions and Events)."""

    # a reconcile's outcome
    RECONCILIATION_SUCCEEDED = "ReconciliationSucceeded"
    INSTALL_SUCCEEDED = "InstallSucceeded"
    INSTALL_FAILED = "InstallFailed"
    UPGRADE_SUCCEEDED = "UpgradeSucceeded"
    UPGRADE_FAILED = "UpgradeFailed"
    UNINSTALL_FAILED = "UninstallFailed"
    UNINSTALLED = "Uninstalled"
    CHART_LOAD_FAILED = "ChartLoadFailed"
    RELEASE_NOT_OWNED = "ReleaseNotOwned"
    RETRY_PENDING = "RetryPending"
    RETRIES_EXHAUSTED = "RetriesExhausted"
    SHUTTING_DOWN = "ShuttingDown"
    CANCELLED = "Cancelled"  # the resource is being deleted: its action stopped
    UNLOCKED = "Unlocked"
    NOT_STALLED = "NotStalled"
    # an action in progress
    INSTALLING = "Installing"
    UPGRADING = "Upgrading"
    REINSTALLING = "Reinstalling"
    ROLLING_BACK = "RollingBack"
    UNINSTALLING = "Uninstalling"
    PROGRESSING = "Progressing"
    # remediation
    ROLLED_BACK = "RolledBack"
    ROLLBACK_FAILED = "RollbackFailed"
    CLEANED_UP = "CleanedUp"
    CLEANUP_FAILED = "CleanupFailed"
    HEALTHY = "Healthy"
    # drift and the workloads' part of Ready
    NO_DRIFT = "NoDrift"
    DRIFT_DETECTED = "DriftDetected"
    DRIFT_CORRECTED = "DriftCorrected"
    DRIFT_CHECK_DISABLED = "DriftCheckDisabled"
    CORRECTING = "Correcting"
    WORKLOADS_READY = "WorkloadsReady"
    WORKLOADS_NOT_READY = "WorkloadsNotReady"
    # day-2 hooks
    HOOKS_SUCCEEDED = "HooksSucceeded"


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class Condition(NamedTuple):
    """One condition to set: ``status`` True, False or None (Unknown)."""

    type: ConditionType
    status: bool | None
    reason: str
    message: str


class Event(NamedTuple):
    """One core/v1 Event to post on the resource (its message masked already)."""

    type: EventType
    reason: str
    message: str

    @classmethod
    def normal(cls, reason: str, message: str) -> Event:
        return cls(EventType.NORMAL, reason, message)

    @classmethod
    def warning(cls, reason: str, message: str) -> Event:
        return cls(EventType.WARNING, reason, message)


def events_of(raw: Iterable[tuple[str, str, str]]) -> list[Event]:
    """Typed Events from the loose (type, reason, message) form."""
    return [Event(EventType(etype), reason, message) for etype, reason, message in raw]
