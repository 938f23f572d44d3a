"""What the status and Events say, as types: condition types, the operator's own reasons, and
typed condition and Event values.

The enums are ``StrEnum`` so they serialise exactly as the strings users (and ``kubectl wait``)
see. Every reason the engine decides or branches on is a ``Reason``: its own outcomes, Helm's
error classes (``adapters.helm.classify``), the desired release's refusals, the tenant rules'
verdicts and the day-2 engines' results; control flow compares members, never message text. A
reason field stays ``str`` only where it is read back from a status or chosen by a hook module
(``ctx.event("BackupStarted", …)``: the hook author's vocabulary, not the engine's).
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple


class ConditionType(StrEnum):
    """The condition types on a resource's status; each comment is what the type says (the
    condition table in docs/status.md is generated from them)."""

    READY = "Ready"  # the release of its observedGeneration is deployed and its workloads ready (kstatus)
    RECONCILING = "Reconciling"  # an action runs, or a gate holds a change, for the generation (kstatus)
    STALLED = "Stalled"  # retrying cannot help: it waits for a change (kstatus)
    RELEASED = "Released"  # how the last Helm action on the release went
    REMEDIATED = "Remediated"  # how a failed upgrade's rollback or a failed install's cleanup went
    DRIFTED = "Drifted"  # what the last drift check found
    UPGRADE_PENDING = "UpgradePending"  # a change waits for a maintenance window
    APPROVAL_PENDING = "ApprovalPending"  # a change waits for its plan to be approved
    DAY2 = "Day2"  # whether any day-2 hook's latest result is a failure


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
    # maintenance windows
    UPGRADE_PENDING = "UpgradePending"  # Ready's reason while a change waits: the release runs as before
    OUTSIDE_MAINTENANCE_WINDOW = "OutsideMaintenanceWindow"
    NOTHING_PENDING = "NothingPending"
    WINDOW_OVERRIDDEN = "WindowOverridden"
    WINDOW_OVERRIDE_SPENT = "WindowOverrideSpent"
    INVALID_MAINTENANCE_WINDOW = "InvalidMaintenanceWindow"
    CHART_VERSION_NOT_SERVED = "ChartVersionNotServed"
    # plan and approve
    AWAITING_APPROVAL = "AwaitingApproval"
    STALE_APPROVAL = "StaleApproval"
    PLAN_READY = "PlanReady"
    PLAN_APPROVED = "PlanApproved"
    PLAN_FAILED = "PlanFailed"
    INVALID_APPROVAL = "InvalidApproval"
    # dependencies between resources
    DEPENDENCY_NOT_READY = "DependencyNotReady"
    DEPENDENCY_CYCLE = "DependencyCycle"
    INVALID_DEPENDENCY = "InvalidDependency"
    DEPENDENTS_REMAIN = "DependentsRemain"  # an uninstall waits for what depends on the resource
    # staged rollouts (on resources, and on the Rollout object of a watch)
    ROLLOUT_PENDING = "RolloutPending"  # Ready's reason while a change waits for the resource's wave
    ROLLOUT_ROLLED_BACK = "RolloutRolledBack"  # its wave failed: back on the version it ran before
    TEST_FAILED = "TestFailed"  # the chart's `helm test` hooks failed after an admitted upgrade
    TEST_SUCCEEDED = "TestSucceeded"  # they passed: the revision counts for its wave
    TEST_PENDING = "TestPending"  # upgraded; its tests run next
    ROLLOUT_STARTED = "RolloutStarted"
    WAVE_STARTED = "WaveStarted"
    WAVE_COMPLETED = "WaveCompleted"
    ROLLOUT_HALTED = "RolloutHalted"
    ROLLOUT_COMPLETED = "RolloutCompleted"
    ROLLOUT_PAUSED = "RolloutPaused"
    ROLLOUT_RESUMED = "RolloutResumed"
    ROLLOUT_ABORTED = "RolloutAborted"
    # drift and the workloads' part of Ready
    NO_DRIFT = "NoDrift"
    DRIFT_DETECTED = "DriftDetected"
    DRIFT_CORRECTED = "DriftCorrected"
    DRIFT_CHECK_DISABLED = "DriftCheckDisabled"
    CORRECTING = "Correcting"
    WORKLOADS_READY = "WorkloadsReady"
    WORKLOADS_NOT_READY = "WorkloadsNotReady"
    # Helm's error classes (what ``adapters.helm.classify`` reads from helm's output)
    RENDER_FAILED = "RenderFailed"
    NAMESPACE_VIOLATION = "NamespaceViolation"  # also a tenant rule's verdict (``core.tenancy``)
    CLUSTER_SCOPED_NOT_ALLOWED = "ClusterScopedNotAllowed"  # also the tenant rules' and crds/'
    OWNERSHIP_CONFLICT = "OwnershipConflict"
    FIELD_CONFLICT = "FieldConflict"  # a server-side apply conflict (``release.conflicts``)
    RELEASE_TOO_LARGE = "ReleaseTooLarge"  # also decided before Helm runs (``runtime.desired``)
    KIND_NOT_SERVED = "KindNotServed"
    TIMEOUT = "Timeout"
    CONNECTION_FAILED = "ConnectionFailed"
    LOCKED = "Locked"
    HELM_FAILED = "HelmFailed"
    # the desired release
    INVALID_VALUES = "InvalidValues"
    # day-2 hooks: a hook's result, the Day2 condition, the engines' Events
    HOOKS_SUCCEEDED = "HooksSucceeded"
    HOOK_FAILED = "HookFailed"
    HOOK_TIMED_OUT = "HookTimedOut"
    HOOK_RETRYING = "HookRetrying"
    INVALID_SPEC = "InvalidSpec"
    UNKNOWN_ACTION = "UnknownAction"
    ACTION_HELD = "ActionHeld"
    ACTION_STARTED = "ActionStarted"
    ACTION_SUCCEEDED = "ActionSucceeded"
    MISSED_SCHEDULE = "MissedSchedule"
    UNINSTALL_WAITING = "UninstallWaiting"
    UNINSTALL_BLOCKED = "UninstallBlocked"
    HOOKS_OVERRIDDEN = "HooksOverridden"
    HOOK_GAVE_UP = "HookGaveUp"
    # the day-2 built-ins' outcomes that alerts key on
    BACKUP_VERIFIED = "BackupVerified"
    BACKUP_VERIFICATION_FAILED = "BackupVerificationFailed"


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
