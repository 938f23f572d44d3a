"""Which member of a replicated StatefulSet is the primary (pure).

The primary is the Pod carrying a role label the client Service selects. It keeps the role while
it is Ready; once it has been not Ready (or gone) for the failover delay, or at once when its Pod is
being deleted, the Ready member that has received the most of its log is promoted (given the
members' positions; otherwise the one with the lowest ordinal). The old primary is always demoted
*before* the new one is promoted, so no observer ever sees two primaries; a demoted member that
comes back stays a replica.

A member that starts again (its server in place, its container restarted, or a new Pod) holds no
authority from before: a chart that fences at start runs it read-only until the operator's word is
newer than the one it started with. Each confirmed primary's *incarnation* (the Pod's uid and its
containers' restarts) is on record; a primary seen in another incarnation, or whose server says it
started again in place under the word it still has (``restarted``), is confirmed again (relabelled
with the next generation) once it has started (a new container past its startup probe, or its
server started again in place; a chart whose Ready needs writes is not Ready before that) and
before the failover delay has passed, or later while no other member could take over — only
while it still is the primary on record, so a member that was replaced meanwhile never takes
writes it would lose to the one promoted in its place.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helm_operator.hooks.schedule import parse_time

NO_CANDIDATE_RECHECK = 10.0  # seconds between looks while no replica is Ready to take over


@dataclass(frozen=True)
class Member:
    name: str
    ordinal: int
    ready: bool
    since: dt.datetime | None  # when readiness last changed (the Ready condition's lastTransitionTime)
    primary: bool  # carries the primary role label
    deleting: bool = False
    incarnation: str = ""  # "<uid>/<restarts>": one run of the Pod's containers
    started: bool = False  # every container runs and has started (its startup probe passed)
    # Its server started again in place under the word it still has (the chart's word, read apart):
    # a primary fenced, waiting for a newer word, its container not restarted.
    restarted: bool = False

    @classmethod
    def of(cls, pod: Mapping[str, Any], label: str, primary: str = "primary") -> Member:
        meta = pod["metadata"]
        name = str(meta["name"])
        ready = next(
            (c for c in (pod.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"), None
        )
        suffix = name.rsplit("-", 1)[-1]
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
        started = bool(statuses) and all(
            c.get("started") is True and "running" in (c.get("state") or {}) for c in statuses
        )
        return cls(
            name=name,
            ordinal=int(suffix) if suffix.isdigit() else 1 << 30,
            ready=bool(ready and ready.get("status") == "True"),
            since=parse_time((ready or {}).get("lastTransitionTime")),
            primary=(meta.get("labels") or {}).get(label) == primary,
            deleting=bool(meta.get("deletionTimestamp")),
            incarnation=f"{meta.get('uid') or ''}/{restarts}",
            started=started,
        )

    @property
    def serving(self) -> bool:
        return self.ready and not self.deleting

    @property
    def answering(self) -> bool:
        """Serving, or started and not being deleted: its server answers, even if its chart does
        not call it Ready (fenced, read-only, waiting for a word)."""
        return self.serving or (self.started and not self.deleting)


@dataclass(frozen=True)
class Election:
    primary: str | None  # the primary once this step is applied
    demote: tuple[str, ...] = ()  # members to take the label from, first
    promote: str | None = None  # the member to give it to, after
    failover: bool = False  # ``promote`` replaces a primary that is not Ready
    wait: float | None = None  # seconds until the next look (a grace period is running)
    unready_since: dt.datetime | None = None  # when the primary was first seen not Ready (to record)
    reason: str = ""
    requested: bool = False  # a switchover someone asked for
    confirmed: bool = False  # ``promote`` is the primary itself, started again: confirmed in its role
    incarnation: str | None = None  # the primary's incarnation once this step is applied (to record)


def _labelled_except(members: Sequence[Member], keep: str | None) -> tuple[str, ...]:
    return tuple(m.name for m in members if m.primary and m.name != keep)


def _candidate(
    members: Sequence[Member], exclude: str | None, positions: Mapping[str, int] | None = None
) -> Member | None:
    """The Ready member to promote: the most advanced by ``positions`` (how far each has received
    the primary's log; one not known counts as least), then the lowest ordinal."""
    at = positions or {}
    ready = [m for m in members if m.serving and m.name != exclude]
    ready.sort(key=lambda m: (-at.get(m.name, -1), m.ordinal))
    return ready[0] if ready else None


def candidates(members: Sequence[Member], current: str | None) -> list[str]:
    """The members a failover from ``current`` could promote (to rank by their position)."""
    return [m.name for m in members if m.serving and m.name != current]


def _started(members: Sequence[Member]) -> Member | None:
    """The lowest member that answers although not Ready (a chart whose data, restored, waits in
    recovery for its first word is Ready only once it takes writes)."""
    up = sorted((m for m in members if m.answering), key=lambda m: m.ordinal)
    return up[0] if up else None


def _unready_for(
    me: Member | None, unready_since: dt.datetime | None, now: dt.datetime, given: dt.datetime | None
) -> tuple[dt.datetime, float]:
    """Since when the primary on record has not been Ready (the earlier of the record and its
    Ready condition's last change, but not before it was ``given`` the role: a standby's last
    change may predate its promotion, which takes a moment), and for how many seconds."""
    seen = [t for t in (unready_since, me.since if me is not None and not me.ready else None) if t]
    since = min(seen) if seen else now
    if given is not None and since < given:
        since = min(given, now)
    return since, (now - since).total_seconds()


def elect(
    members: Sequence[Member],
    current: str | None,
    delay: float,
    now: dt.datetime,
    unready_since: dt.datetime | None = None,
    confirmed: str | None = None,
    positions: Mapping[str, int] | None = None,
    given: dt.datetime | None = None,
) -> Election:
    """The next step towards exactly one Ready primary. ``current`` is the primary on record
    (``status.day2.currentPrimary``); ``unready_since`` when it was first seen not Ready;
    ``confirmed`` the incarnation it was last confirmed in (None: none on record yet);
    ``positions`` how far each standby has received the primary's log (a failover promotes the
    most advanced; without them, the lowest ordinal); ``given`` when the role went to it."""
    labelled = [m for m in members if m.primary]
    if current is None and len(labelled) == 1:
        current = labelled[0].name
    me = next((m for m in members if m.name == current), None)
    unready = _unready_for(me, unready_since, now, given)
    again = (
        me is not None
        and me.primary
        and confirmed is not None
        and (me.incarnation != confirmed or me.restarted)
    )
    # Within the delay; after it too when no standby could take over (one instance, or none Ready):
    # it is still the primary on record, with the newest data, and otherwise nothing would serve.
    in_time = unready[1] < delay or _candidate(members, current) is None
    if again and me is not None and me.answering and in_time:
        return Election(
            me.name,
            _labelled_except(members, me.name),
            me.name,
            confirmed=True,
            incarnation=me.incarnation,
            unready_since=None if me.serving else unready[0],
            wait=None if me.serving else max(delay - unready[1], 1.0),  # Ready, or a failover then
            reason=f"{me.name} started again and is still the primary on record",
        )
    # The primary on record keeps (or, in a new Pod without the label, gets back) the role while
    # Ready; a new Pod of it that answers, fenced, gets it back too (its volume holds the newest data).
    if me is not None and (me.serving or (me.answering and not me.primary)):
        demote = _labelled_except(members, me.name)
        promote = None if me.primary else me.name
        why = f"{me.name} is Ready" if me.serving else f"{me.name} started again"
        return Election(me.name, demote, promote, incarnation=me.incarnation, reason=why)
    if current is None:  # a new cluster: the first member that is Ready (instance 0 initialises the data)
        first = _candidate(members, None) or _started(members)  # or restored data waiting for a word
        if first is None:
            return Election(None, reason="no member is Ready yet")
        demote = _labelled_except(members, first.name)
        return Election(
            first.name,
            demote,
            first.name,
            incarnation=first.incarnation,
            reason=f"{first.name} is the first Ready member",
        )
    since, elapsed = unready
    state = "gone" if me is None else "being deleted" if me.deleting else "not Ready"
    deleting = me is not None and me.deleting  # it is not coming back as it was: no grace period
    if elapsed < delay and not deleting:
        return Election(
            current,
            wait=delay - elapsed,
            unready_since=since,
            reason=f"primary {current} {state} for {elapsed:.0f}s; failover after {delay:g}s",
        )
    successor = _candidate(members, current, positions)
    if successor is None:
        return Election(
            current,
            wait=NO_CANDIDATE_RECHECK,
            unready_since=since,
            reason=f"primary {current} {state} for {elapsed:.0f}s and no replica is Ready to take over",
        )
    why = "its Pod is being deleted" if deleting else f"failoverDelay {delay:g}s"
    return Election(
        successor.name,
        _labelled_except(members, successor.name),
        successor.name,
        failover=True,
        incarnation=successor.incarnation,
        reason=f"primary {current} {state} for {elapsed:.0f}s ({why})",
    )


def warns(election: Election, given: dt.datetime | None) -> bool:
    """Whether the primary's first look not Ready is worth a Warning: not while it is still taking
    the role it was just given (its unready time starts at the hand-over: an install or a promotion
    takes a moment; a failover follows if it never gets Ready), nor as it is confirmed after
    starting again (``PrimaryConfirmed`` says so)."""
    since = election.unready_since
    if since is None or election.confirmed:
        return False
    return given is None or since > given


def switch(members: Sequence[Member], target: str) -> Election:
    """A requested switchover to ``target``; ``ValueError`` says why it cannot be done."""
    me = next((m for m in members if m.name == target), None)
    if me is None:
        known = ", ".join(m.name for m in members) or "none"
        raise ValueError(f"no member {target!r}; members: {known}")
    if not me.serving:
        raise ValueError(f"{target} is not Ready; a switchover needs a Ready member")
    promote = None if me.primary else me.name
    demote = _labelled_except(members, me.name)
    return Election(
        me.name,
        demote,
        promote,
        incarnation=me.incarnation,
        reason=f"switchover to {target}",
        requested=True,
    )
