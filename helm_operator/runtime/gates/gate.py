"""What a gate is: asked about the action a release's state decided, it lets it pass, holds the
change (the release runs as it is) or redirects the turn to another action."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from helm_operator.config.charts import ChartInfo
from helm_operator.core.conditions import Contribution
from helm_operator.core.vocabulary import ConditionType, Event
from helm_operator.release.outcome import Outcome
from helm_operator.release.record import StoredRelease
from helm_operator.release.state import Action
from helm_operator.runtime.desired import Resource, Target
from helm_operator.runtime.result import Result
from helm_operator.runtime.services import Runtime


@dataclass(frozen=True)
class Change:
    """The change a turn decided, as the gates see it."""

    rt: Runtime
    cr: Resource
    target: Target
    release: StoredRelease | None  # what runs now
    action: Action
    chart: ChartInfo
    track: Callable[[], None]  # from now on changes of the release's objects trigger checks


@dataclass(frozen=True)
class Pass:
    events: tuple[Event, ...] = ()  # what letting it through is worth saying (an override used)
    said: Contribution | None = None  # its status (None: what it says when it holds nothing)


@dataclass(frozen=True)
class Hold:
    """The change waits. Said once: a stalled hold by a Warning while ``Stalled`` does not say it
    yet, any other by a Normal Event while ``told_by`` does not (None: the gate's own ``events``
    tell it). ``look_again``: seconds until the gate is asked again (a dependency's change or an
    opening window is not an event of this resource); ``retry``: as a retry (the process, not the
    change, is the reason). ``corrects_drift``: the release runs as it is and its live objects
    are still compared with it and corrected meanwhile."""

    outcome: Outcome
    look_again: float | None = None
    corrects_drift: bool = False
    told_by: ConditionType | None = ConditionType.READY
    said: Contribution | None = None
    events: tuple[Event, ...] = ()
    retry: bool = False


@dataclass(frozen=True)
class Redirect:
    """Another action runs instead of the decided one (a failed wave's rollback)."""

    to: Callable[[], Awaitable[Result]]


class Gate(Protocol):
    name: str
    holds: frozenset[Action]  # the decided actions it may hold (any other passes, once its input is read)

    async def check(self, change: Change) -> Pass | Hold | Redirect:
        """Pass, hold or redirect ``change``; a resource's unreadable input for this gate (an
        annotation) is a stalled hold whatever the action."""
        ...

    def idle(self, cr: Resource) -> Contribution | None:
        """Its status when it holds nothing: not asked this turn, or passed."""
        ...


def as_is(change: Change, reason: str, message: str) -> Outcome:
    """A held change: the release runs as it is (``Ready`` says how, for the generation its
    running revision was made from; in progress while no revision is deployed)."""
    release = change.release
    deployed = release is not None and release.status == "deployed"
    return Outcome(
        "ready" if deployed else "progressing",
        reason,
        message,
        release=release,
        digest=change.target.digest,
        held=True,
    )
