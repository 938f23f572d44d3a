"""Whether this replica may act: the lease it last renewed is still its own.

Kubernetes has no fencing for Leases: a write is accepted from whoever sends it, so a leader must
stop itself. A standby takes the lease over no sooner than the lease duration after it *saw* the
leader's last renewal, which the leader sent after the renewal attempt began. So a leader may act
for the renew deadline after the start of its last renewal that succeeded, measured on a monotonic
clock, and the difference up to the lease duration is the margin for a write already on its way.

A term that ran out is never valid again, even if a later renewal succeeds: while this process was
paused another replica may have led, acted and handed the lease back, and what this one believed
before the pause (a release it was upgrading, a status it was about to write) is stale.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace


class LeaseLost(RuntimeError):
    """An action or write was refused: this replica no longer holds its lease."""


Gate = Callable[[str], None]
"""Called with what is about to be done (``"helm upgrade"``, ``"PATCH /apis/…"``) before doing it;
returns when acting is allowed, never returns or raises :class:`LeaseLost` when it is not."""


def open_gate(what: str) -> None:
    """The gate of an operator without leader election: it always acts."""


@dataclass(frozen=True)
class LeaseTerm:
    """The lease as this replica knows it; times are readings of one monotonic clock (seconds)."""

    deadline: float  # the renew deadline
    renewed_at: float | None = None  # when the last renewal that succeeded began; None: never held
    lapsed: bool = False  # ran out once: never valid again

    def valid(self, now: float) -> bool:
        return not self.lapsed and self.renewed_at is not None and now - self.renewed_at < self.deadline

    def renewal(self, began: float) -> LeaseTerm:
        """The term after a renewal (or the first acquisition) that began at ``began`` succeeded.
        One that began after the term had run out does not revive it."""
        if self.lapsed:
            return self
        if self.renewed_at is not None and not self.valid(began):
            return replace(self, lapsed=True)
        return replace(self, renewed_at=max(began, self.renewed_at or began))

    def at(self, now: float) -> LeaseTerm:
        """The term as a gate finds it at ``now``: lapsed for good once it ran out."""
        if self.renewed_at is not None and not self.lapsed and not self.valid(now):
            return replace(self, lapsed=True)
        return self

    def age(self, now: float) -> float | None:
        """Seconds since the last renewal began (for messages)."""
        return None if self.renewed_at is None else now - self.renewed_at
