"""The typed result of one reconcile step, in the terms the status speaks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from helm_operator.release.record import StoredRelease

Phase = Literal["ready", "failed", "stalled", "progressing"]


@dataclass(frozen=True)
class Remediation:
    """What was done to recover from a failed action, and whether it worked."""

    kind: Literal["rollback", "uninstall"]  # roll back a failed upgrade; remove a failed install's debris
    succeeded: bool
    message: str

    @property
    def reason(self) -> str:
        if self.kind == "rollback":
            return "RolledBack" if self.succeeded else "RollbackFailed"
        return "CleanedUp" if self.succeeded else "CleanupFailed"


@dataclass(frozen=True)
class Outcome:
    """The result of one reconcile, in the terms the status speaks."""

    phase: Phase
    reason: str
    message: str
    action: str | None = None  # the Helm action that ran, if any
    release: StoredRelease | None = None
    digest: str | None = None  # the desired digest this outcome is about
    remediation: Remediation | None = None  # what was done after a failure, and whether it worked
    permanent: bool = False  # a failure retrying cannot fix: remembered so resyncs do not retry it
