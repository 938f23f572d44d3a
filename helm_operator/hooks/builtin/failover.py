"""Carry out an :class:`~helm_operator.hooks.builtin.primary.Election`: move the role label between
Pods (demotions first), record the primary in ``status.day2``, and say so with Events.

The role label lives on the Pods, which the release does not render (their StatefulSet does), so
drift correction of the release never touches it. :func:`keep_primary` (a watch hook on the
Pods) and :func:`switchover` (an action) are the whole of a sample's primary policy.

An instance that reads its role from its labels through the downward API learns of a change only
when the kubelet next rewrites that file: usually within seconds, sometimes a minute later (the
kubelet's periodic pod sync). With a :class:`RoleFile`, each member is also told at once, through
``exec``: every label change carries a generation (a second label), the file gets the role and
that generation, and the chart believes whichever copy has the higher one — a late copy from the
kubelet never undoes a newer word, and a member the operator cannot reach still learns from it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from helm_operator.hooks.builtin.primary import Election, Member, candidates, elect, switch, warns
from helm_operator.hooks.context import Context, ExecFailed
from helm_operator.hooks.errors import PermanentError, TemporaryError
from helm_operator.hooks.schedule import parse_time, rfc3339

Select = Callable[[Mapping[str, Any]], bool]  # which of the release's Pods are members
# How far each named member has received the primary's log (a higher number: more); members it
# could not ask are left out.
Rank = Callable[[Sequence[str]], Awaitable[Mapping[str, int]]]

TELL_WITHIN = 3.0  # seconds a member has to take its role through exec before its label must do
CURRENT = "currentPrimary"  # status.day2 keys
UNREADY_SINCE = "primaryUnreadySince"
CONFIRMED = "primaryIncarnation"  # the primary's Pod uid and restarts when it was last given the role
GIVEN = "primarySince"  # when the role last went to another member (its unready time counts from then)
CHANGES = "primaryChanges"  # the last moves of the role: when, from, to, how and why (Events expire)
KEEP_CHANGES = 10


def members(pods: Sequence[Mapping[str, Any]], label: str) -> list[Member]:
    return [Member.of(p, label) for p in pods]


@dataclass(frozen=True)
class RoleFile:
    """Where a member's container keeps the role it was told (a memory-backed ``emptyDir``):
    one line, ``<role> <generation>``, replaced atomically. ``serving``: a file in which a chart
    that restarts its server in place (not its container) names the generation its running server
    started with, or ``stopped``: how the fence learns that a demoted member's server has ended."""

    path: str
    container: str | None = None
    serving: str | None = None


def generation_label(label: str) -> str:
    """The label that numbers changes of ``label`` (``example.com/role`` → ``…/role-generation``)."""
    return f"{label}-generation"


def generation(pod: Mapping[str, Any], label: str) -> int:
    """The Pod's last role change's number (0: never changed since the Pod was made)."""
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(generation_label(label), "0")
    return int(value) if str(value).isdigit() else 0


def tell_argv(path: str, role: str, number: int) -> list[str]:
    """The command that writes the role file: values are arguments, never script text."""
    script = 'printf "%s %s\\n" "$1" "$2" > "$3.new" && mv -f "$3.new" "$3"'
    return ["sh", "-c", script, "tell-role", role, str(number), path]


async def _label(ctx: Context, pod: str, label: str, value: str, numbered: bool = False) -> int | None:
    """Set the role label (``numbered``: with the next generation); the generation set (0 when
    not numbered), None if the Pod is gone."""
    labels = {label: value}
    number = 0
    if numbered:
        found = await ctx.kube.get("v1", "Pod", pod, ctx.namespace)
        if found is None:
            return None
        number = generation(found, label) + 1
        labels[generation_label(label)] = str(number)
    try:
        await ctx.kube.patch("v1", "Pod", pod, ctx.namespace, {"metadata": {"labels": labels}})
    except Exception as exc:
        if getattr(exc, "status", None) == 404:
            return None
        raise TemporaryError(f"could not label Pod {pod}: {exc}", delay=2.0) from exc
    return number


async def _tell(ctx: Context, pod: str, tell: RoleFile, role: str, number: int) -> None:
    """Tell the member the role its label now has, at once (best effort)."""
    argv = tell_argv(tell.path, role, number)
    try:
        # Bounded: the API server may take half a minute to give up on a node that is gone, and
        # the label, not this, is what the member must eventually follow.
        await asyncio.wait_for(ctx.kube.exec(pod, str(ctx.namespace), argv, tell.container), TELL_WITHIN)
    except (ExecFailed, TimeoutError) as exc:  # it learns from the kubelet's copy of its labels
        why = exc if isinstance(exc, ExecFailed) else f"no answer within {TELL_WITHIN:g}s"
        ctx.log.info("could not tell %s it is %s at once (%s); it reads its label", pod, role, why)


async def _relabel(ctx: Context, pod: str, label: str, role: str, tell: RoleFile | None) -> int | None:
    """Label and tell at once; the generation given (0 when not numbered), None if the Pod is gone."""
    number = await _label(ctx, pod, label, role, numbered=tell is not None)
    if number is not None and tell is not None:
        await _tell(ctx, pod, tell, role, number)
    return number


async def _serving(ctx: Context, pod: str, tell: RoleFile | None) -> str | None:
    """What the member's ``serving`` file says: the word its running server started with, or
    ``stopped``; None when it cannot say (no such file, no answer)."""
    if tell is None or tell.serving is None:
        return None
    try:
        said = await asyncio.wait_for(
            ctx.kube.exec(pod, str(ctx.namespace), ["cat", tell.serving], tell.container), TELL_WITHIN
        )
    except (ExecFailed, TimeoutError):
        return None
    return said.strip()


async def _restarted_in_place(ctx: Context, pod: str, tell: RoleFile | None, number: int) -> bool:
    """Whether the member says its server ended, or started again under the word numbered
    ``number`` or a later one (a standby then: the chart fences every start); False when it
    cannot say."""
    word = await _serving(ctx, pod, tell) or ""
    return word == "stopped" or (word.isdigit() and int(word) >= number)


async def _started_again_in_place(
    ctx: Context,
    pods: Sequence[Mapping[str, Any]],
    found: list[Member],
    current: str | None,
    confirmed: str | None,
    label: str,
    tell: RoleFile,
) -> tuple[list[Member], bool]:
    """The members, the primary on record marked ``restarted`` when, not Ready in the incarnation
    last confirmed, its server says it started again in place under the word it is labelled with
    (fenced: its container did not restart, so only its word tells); and whether that server is
    stopped right now, about to start again (look again soon, not when the delay ends)."""
    me = next((m for m in found if m.name == current), None)
    if me is None or not me.primary or me.ready or not me.answering or me.incarnation != confirmed:
        return found, False
    word = await _serving(ctx, me.name, tell) or ""
    if word == "stopped":
        return found, True
    pod = next(p for p in pods if p["metadata"]["name"] == me.name)
    if not (word.isdigit() and int(word) >= generation(pod, label)):
        return found, False  # the server that was promoted runs (hung, or slow to answer)
    return [replace(m, restarted=True) if m is me else m for m in found], False


def _incarnation(pod: Mapping[str, Any] | None) -> tuple[str, int, bool] | None:
    """What identifies one run of a Pod's processes: its uid, its containers' restarts, and whether
    one runs now; None when the Pod is gone."""
    if pod is None:
        return None
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    running = any("running" in (c.get("state") or {}) for c in statuses)
    return str(pod["metadata"].get("uid") or ""), restarts, running


async def incarnations(ctx: Context, pods: Sequence[str]) -> dict[str, tuple[str, int, bool] | None]:
    return {name: _incarnation(await ctx.kube.get("v1", "Pod", name, ctx.namespace)) for name in pods}


async def still_running(
    ctx: Context,
    at_demotion: Mapping[str, tuple[str, int, bool] | None],
    within: float,
    tell: RoleFile | None = None,
    demoted: Mapping[str, int] | None = None,
) -> list[str]:
    """Wait up to ``within`` seconds for the processes the demoted Pods ran when demoted to end:
    the Pod gone or replaced, its containers restarted, or none running (readiness does not tell:
    a restarted primary may accept writes before it is Ready) — or, with ``tell``'s ``serving``
    file, the member's word that its server stopped or started again after its demotion (numbered
    ``demoted[name]``). The ones still running."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        running = []
        for name, then in at_demotion.items():
            now = _incarnation(await ctx.kube.get("v1", "Pod", name, ctx.namespace))
            if then is not None and now is not None and now[:2] == then[:2] and now[2]:
                number = (demoted or {}).get(name)
                if number is None or not await _restarted_in_place(ctx, name, tell, number):
                    running.append(name)
        if not running or loop.time() >= deadline:
            return running
        await asyncio.sleep(0.2)  # the promotion waits for this: look again soon


async def apply(
    ctx: Context,
    election: Election,
    label: str,
    *,
    replica: str = "replica",
    fence: float | None = None,
    tell: RoleFile | None = None,
) -> None:
    """Demote, then promote, then record; an Event for a failover, a switchover or a grace period.

    ``fence`` (seconds): before promoting, wait for the demoted Pods' processes to end — for a
    chart whose primary stops (or starts again in place as a standby) when its label goes (never
    two writable primaries, and a standby promoted only after the old primary sent it its last
    writes). One still running after that gets its label back and the promotion is not made.
    ``tell``: also tell each member its role at once (see :class:`RoleFile`)."""
    fenced = fence is not None and election.promote is not None and bool(election.demote)
    running_then = await incarnations(ctx, election.demote) if fenced else {}
    demoted: dict[str, int] = {}
    for pod in election.demote:
        number = await _relabel(ctx, pod, label, replica, tell)
        if number is not None:
            demoted[pod] = number
    if fence is not None and fenced:
        stuck = await still_running(ctx, running_then, fence, tell, demoted)
        if stuck:
            for pod in stuck:
                await _relabel(ctx, pod, label, "primary", tell)
            raise PermanentError(
                f"{', '.join(stuck)} still running {fence:g}s after losing the primary label: "
                f"{election.promote} not promoted (never two primaries)"
            )
    promoted: int | None = None
    if election.promote is not None:
        promoted = await _label(ctx, election.promote, label, "primary", numbered=tell is not None)
        if promoted is None:
            raise TemporaryError(f"Pod {election.promote} vanished before it was promoted", delay=1.0)
    before = ctx.day2.get(CURRENT)
    if election.primary != before:
        now = rfc3339(dt.datetime.now(dt.UTC))
        ctx.day2[CURRENT] = election.primary
        ctx.day2[GIVEN] = now
        if before is not None and election.primary is not None:
            how = "Failover" if election.failover else "Switchover" if election.requested else "Changed"
            change = {"at": now, "from": before, "to": election.primary, "how": how}
            change["reason"] = election.reason
            ctx.day2[CHANGES] = [*(ctx.day2.get(CHANGES) or []), change][-KEEP_CHANGES:]
    since = rfc3339(election.unready_since) if election.unready_since else None
    if since != ctx.day2.get(UNREADY_SINCE):
        if ctx.day2.get(UNREADY_SINCE) is None and warns(election, parse_time(ctx.day2.get(GIVEN))):
            await ctx.event("PrimaryUnready", election.reason, warning=True)
        ctx.day2[UNREADY_SINCE] = since
    if election.failover:
        await ctx.event("Failover", f"{election.reason}: promoted {election.primary}", warning=True)
    elif election.requested:
        await ctx.event("Switchover", f"primary was {before or 'unset'}, is now {election.primary}")
    elif before is not None and election.primary != before:
        await ctx.event("PrimaryChanged", f"{election.reason}: primary is now {election.primary}")
    elif before is None and election.primary is not None:
        await ctx.event("PrimaryElected", f"{election.reason}: primary is {election.primary}")
    elif election.confirmed:
        await ctx.event("PrimaryConfirmed", f"{election.reason}: confirmed, it takes writes again")
    # The incarnation given the role now, or the primary from before this record (as it runs now).
    if (
        tell is not None
        and election.incarnation is not None
        and (promoted is not None or ctx.day2.get(CONFIRMED) is None)
    ):
        ctx.day2[CONFIRMED] = election.incarnation
    await ctx.day2.save()
    if tell is not None and election.promote is not None and promoted is not None:
        await _tell(ctx, election.promote, tell, "primary", promoted)  # after the record: it names it


async def keep_primary(
    ctx: Context,
    label: str,
    delay: float,
    members_of: Select,
    *,
    fence: float | None = None,
    tell: RoleFile | None = None,
    rank: Rank | None = None,
    show: Callable[[int], str] = str,
) -> None:
    """A watch hook on the release's Pods: keep exactly one Ready primary (label the first Ready
    member, promote a Ready member once the primary has not been Ready for ``delay`` seconds);
    while a grace period runs, look again when it is over. ``fence`` and ``tell``: as in
    :func:`apply`; with ``tell`` (numbered roles), a primary that started again is confirmed with
    the next number (see :mod:`~helm_operator.hooks.builtin.primary`): in a new container, or,
    by ``tell``'s ``serving`` word, its server in place. ``rank``: how far each
    candidate has received the primary's log, asked only when a failover is due; the most
    advanced is promoted (else the lowest ordinal); ``show`` writes a position as the Event says it."""
    pods = [p for p in ctx.objects if members_of(p)]
    found = members(pods, label)
    current = ctx.day2.get(CURRENT)
    now = dt.datetime.now(dt.UTC)
    since = parse_time(ctx.day2.get(UNREADY_SINCE))
    confirmed = ctx.day2.get(CONFIRMED) if tell is not None else None
    given = parse_time(ctx.day2.get(GIVEN))
    restarting = False
    if tell is not None and tell.serving is not None:
        found, restarting = await _started_again_in_place(ctx, pods, found, current, confirmed, label, tell)
    election = elect(found, current, delay, now, since, confirmed, given=given)
    if election.failover and rank is not None:
        positions = await rank(candidates(found, current))
        election = elect(found, current, delay, now, since, confirmed, positions, given)
        if positions:
            at = ", ".join(f"{name} {show(positions[name])}" for name in sorted(positions))
            election = replace(election, reason=f"{election.reason}; received log: {at}")
    await apply(ctx, election, label, fence=fence, tell=tell)
    if election.wait is not None:
        raise TemporaryError(election.reason, delay=min(election.wait, 1.0) if restarting else election.wait)


async def switchover(
    ctx: Context,
    label: str,
    members_of: Select,
    *,
    fence: float | None = None,
    tell: RoleFile | None = None,
    to: str | None = None,
) -> None:
    """An action ``switchover=<pod>``: make that Ready member the primary (demoted first: never two;
    ``fence`` and ``tell``: as in :func:`apply`). ``to``: that member, from another hook (a roll
    moving the primary off a member before it restarts)."""
    target = to or ctx.argument
    if not target:
        raise PermanentError("switchover needs the Pod to promote: switchover=<pod>")
    pods = await ctx.kube.list("v1", "Pod", ctx.namespace, labels=ctx.owner_selector)
    try:
        election = switch(members([p for p in pods if members_of(p)], label), target)
    except ValueError as exc:
        raise PermanentError(f"switchover: {exc}") from None
    await apply(ctx, election, label, fence=fence, tell=tell)
