"""The typed result of one reconcile step, in the terms the status speaks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from helm_operator.core.vocabulary import Reason
from helm_operator.release.record import StoredRelease

Phase = Literal["ready", "failed", "stalled", "progressing"]


@dataclass(frozen=True)
class Remediation:
    """What was done to recover from a failed action, and whether it worked."""

    kind: Literal["rollback", "uninstall"]  # roll back a failed upgrade; remove a failed install's debris
    succeeded: bool
    message: str

    @property
    def reason(self) -> Reason:
        if self.kind == "rollback":
            return Reason.ROLLED_BACK if self.succeeded else Reason.ROLLBACK_FAILED
        return Reason.CLEANED_UP if self.succeeded else Reason.CLEANUP_FAILED


@dataclass(frozen=True)
class Outcome:
    """The result of one reconcile, in the terms the status speaks."""

    phase: Phase
    reason: str  # a ``Reason``, or one from Helm's error classes or a hook's result
    message: str
    action: str | None = None  # the Helm action that ran, if any
    release: StoredRelease | None = None
    digest: str | None = None  # the desired digest this outcome is about
    remediation: Remediation | None = None  # what was done after a failure, and whether it worked
    permanent: bool = False  # a failure retrying cannot fix: remembered so resyncs do not retry it
    # A gate (a window, an approval, a rollout's wave) holds the change: the release runs as an
    # earlier generation left it, and the held generation reads as in progress until it is applied.
    held: bool = False
