"""Roll a StatefulSet's members one at a time, each healthy before the next.

A StatefulSet's own RollingUpdate restarts members as soon as the previous one is Ready: it
knows nothing of quorum, replication lag or which member is the primary. A stateful chart that
needs more sets ``updateStrategy: OnDelete``: Helm's upgrade then only changes the template, and an
``after("upgrade")`` hook calls :func:`roll`. It deletes one outdated member at a time (the highest
ordinal first, ``last`` — a primary — after every other), and waits until its replacement runs
the new revision, is Ready and passes ``check`` before the next one goes. Every member must be
Ready and pass ``check`` before any goes, so a roll never takes a second member from a cluster
that is already short of one. ``handover`` runs before each member goes: it moves the role the
member holds (leadership, the primary) to one already restarted, so that clients see a planned
handover rather than an election or a failover. Progress is in ``status.day2.roll``; a roll
resumed after a failed step goes on with the record of the members already restarted. A step that
does not finish within ``timeout`` stops the roll with its reason (a ``TemporaryError``: the
hook's Warning and ``Day2`` condition say it); the members not restarted keep their revision, and
the next call goes on from them: the operator calls an ``after`` hook that raised
``TemporaryError`` again after its delay, without a Helm action.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helm_operator.hooks.context import Context
from helm_operator.hooks.errors import PermanentError, TemporaryError

Check = Callable[[str], Awaitable[str | None]]  # a member's Pod name -> None if healthy, else why not
# (the member's Pod, the StatefulSet's pod template) -> whether that difference needs a restart
Restart = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
# (the member about to restart, the members already on the new revision) -> once its role is moved
Handover = Callable[[str, Sequence[str]], Awaitable[None]]
PROGRESS = "roll"  # the key in status.day2
REVISION_LABEL = "controller-revision-hash"


@dataclass(frozen=True)
class Member:
    """One Pod of the StatefulSet, as the roll sees it."""

    name: str
    ordinal: int
    uid: str
    revision: str
    ready: bool
    terminating: bool
    stale: bool = True  # on an old revision in a way that needs a restart


def members(
    statefulset: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], restart: Restart | None = None
) -> list[Member]:
    """The StatefulSet's own Pods (by owner, so a second StatefulSet's with the same labels are not
    taken), by ordinal. ``restart``: whether a member's difference from the template needs a
    restart (default: any; a chart whose template carries bootstrap-only settings says which)."""
    template = (statefulset.get("spec") or {}).get("template") or {}
    uid = statefulset["metadata"]["uid"]
    name = statefulset["metadata"]["name"]
    found = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if not any(ref.get("uid") == uid for ref in meta.get("ownerReferences") or []):
            continue
        match = re.fullmatch(rf"{re.escape(name)}-(\d+)", str(meta.get("name")))
        if match is None:
            continue
        conditions = (pod.get("status") or {}).get("conditions") or []
        found.append(
            Member(
                name=str(meta["name"]),
                ordinal=int(match.group(1)),
                uid=str(meta.get("uid")),
                revision=str((meta.get("labels") or {}).get(REVISION_LABEL, "")),
                ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
                terminating=bool(meta.get("deletionTimestamp")),
                stale=restart is None or restart(pod, template),
            )
        )
    return sorted(found, key=lambda m: m.ordinal)


def plan(found: Sequence[Member], revision: str, last: str | None = None) -> list[str]:
    """The members still to restart, in order: highest ordinal first, ``last`` after every other."""
    todo = sorted((m for m in found if m.revision != revision and m.stale), key=lambda m: -m.ordinal)
    return [m.name for m in todo if m.name != last] + [m.name for m in todo if m.name == last]


def unhealthy(found: Sequence[Member], replicas: int) -> str | None:
    """Why the StatefulSet cannot lose a member now (None: every one of them is there and Ready)."""
    present = {m.ordinal for m in found}
    missing = [str(i) for i in range(replicas) if i not in present]
    if missing:
        return f"member(s) {', '.join(missing)} missing"
    for m in found:
        if m.terminating:
            return f"{m.name} is terminating"
        if not m.ready:
            return f"{m.name} is not Ready"
    return None


def resumed_from(
    previous: Mapping[str, Any], statefulset: str, revision: str, todo: Sequence[str]
) -> list[str]:
    """The members an interrupted roll to the same revision already restarted, so a roll resumed
    after a failed step reports all of them: its record's ``rolled``, and the member it was
    restarting if that one is on the new revision now. Nothing when that roll finished (no
    ``member``), or was of another StatefulSet or to another revision."""
    if (
        not previous.get("member")
        or previous.get("statefulSet") != statefulset
        or previous.get("revision") != revision
    ):
        return []
    done = [str(m) for m in previous.get("rolled") or [] if m not in todo]
    member = str(previous["member"])
    return [*done, member] if member not in todo and member not in done else done


def update_revision(statefulset: Mapping[str, Any]) -> str | None:
    """The revision every member should run, once the controller has seen the latest spec."""
    status = statefulset.get("status") or {}
    if status.get("observedGeneration", 0) < statefulset["metadata"].get("generation", 0):
        return None
    return str(status["updateRevision"]) if status.get("updateRevision") else None


async def _observe(
    ctx: Context, statefulset: str, restart: Restart | None = None
) -> tuple[dict[str, Any], list[Member]]:
    sts = await ctx.kube.get("apps/v1", "StatefulSet", statefulset, ctx.namespace)
    if sts is None:
        raise PermanentError(f"StatefulSet {statefulset} not found")
    return sts, members(sts, await _pods(ctx, sts), restart)


async def _pods(ctx: Context, sts: Mapping[str, Any]) -> list[dict[str, Any]]:
    selector = (sts.get("spec") or {}).get("selector", {}).get("matchLabels") or {}
    return await ctx.kube.list("v1", "Pod", ctx.namespace, labels=selector)


def unfinished(ctx: Context, statefulset: str) -> bool:
    """Whether a roll of this StatefulSet stopped while a member was restarting: its hook calls
    :func:`roll` again even when no member is outdated, so the roll checks that member and records
    its end."""
    progress = ctx.day2.get(PROGRESS) or {}
    return bool(progress.get("member")) and progress.get("statefulSet") == statefulset


async def outdated(ctx: Context, statefulset: str, restart: Restart | None = None) -> list[str]:
    """The members not on the StatefulSet's update revision, in the order :func:`roll` takes them
    (empty: none, or no such StatefulSet): to skip the work of finding ``last`` when nothing rolls."""
    sts = await ctx.kube.get("apps/v1", "StatefulSet", statefulset, ctx.namespace)
    revision = update_revision(sts) if sts is not None else None
    if sts is None or revision is None:
        return []
    return plan(members(sts, await _pods(ctx, sts), restart), revision)


async def _until(
    ctx: Context, what: str, deadline: float, probe: Callable[[], Awaitable[str | None]]
) -> None:
    """Poll ``probe`` until it finds nothing wrong; past the deadline, stop the roll saying why."""
    loop = asyncio.get_running_loop()
    while True:
        why = await probe()
        if why is None:
            return
        if loop.time() >= deadline:
            await ctx.day2.save()
            raise TemporaryError(f"{what}: {why}", delay=10.0)
        await asyncio.sleep(1.0)


async def roll(
    ctx: Context,
    statefulset: str,
    *,
    check: Check | None = None,
    last: str | None = None,
    restart: Restart | None = None,
    handover: Handover | None = None,
    timeout: float = 300.0,
) -> list[str]:
    """Restart the StatefulSet's outdated members one at a time (see the module); the Pods restarted.

    ``check``: a member's own health beyond Ready (caught up with its peers, a member of the
    cluster), asked of every member before one goes and of each replacement. ``restart``: which
    differences from the template need a restart (default: any). ``handover``: moves the role of
    the member about to restart to one on the new revision (see the module). ``timeout``: seconds
    each step may take."""
    loop = asyncio.get_running_loop()
    sts, _ = await _observe(ctx, statefulset, restart)
    strategy = ((sts.get("spec") or {}).get("updateStrategy") or {}).get("type", "RollingUpdate")
    if strategy != "OnDelete":
        raise PermanentError(
            f"StatefulSet {statefulset} has updateStrategy {strategy}: its controller restarts the "
            "members itself; set OnDelete for the roll to move them one at a time"
        )
    replicas = int((sts.get("spec") or {}).get("replicas", 1))
    previous = dict(ctx.day2.get(PROGRESS) or {})
    rolled: list[str] = []
    resumed = False

    async def healthy(found: Sequence[Member]) -> str | None:
        why = unhealthy(found, replicas)
        if why is None and check is not None:
            for m in found:
                if (why := await check(m.name)) is not None:
                    return f"{m.name}: {why}"
        return why

    async def all_healthy() -> str | None:
        _, now = await _observe(ctx, statefulset, restart)
        return await healthy(now)

    while True:
        revision: str | None = None

        async def observed() -> str | None:
            nonlocal revision, sts
            sts, _ = await _observe(ctx, statefulset, restart)
            revision = update_revision(sts)
            return None if revision else "its controller has not seen the latest template"

        await _until(ctx, f"StatefulSet {statefulset}", loop.time() + timeout, observed)
        assert revision is not None
        _, found = await _observe(ctx, statefulset, restart)
        todo = plan(found, revision, last)
        if not resumed:
            resumed = True
            rolled = resumed_from(previous, statefulset, revision, todo)
        progress = {"statefulSet": statefulset, "revision": revision, "rolled": rolled, "remaining": todo}
        if not todo:
            if rolled:  # the last one restarted passed its check, unless that step is being resumed
                await _until(ctx, f"StatefulSet {statefulset}", loop.time() + timeout, all_healthy)
                ctx.day2[PROGRESS] = {**progress, "member": None}  # none restarting: the key goes
                await ctx.day2.save()
                await ctx.event("Rolled", f"StatefulSet {statefulset}: {', '.join(rolled)} on {revision}")
            return rolled

        await _until(ctx, f"before restarting {todo[0]}", loop.time() + timeout, all_healthy)
        member = next(m for m in found if m.name == todo[0])
        if handover is not None:
            current = [m.name for m in found if m.name not in todo]  # on it, or differing harmlessly
            await handover(member.name, current)
        ctx.day2[PROGRESS] = {**progress, "member": member.name}
        await ctx.day2.save()
        await ctx.event(
            "MemberRestarting", f"{member.name} to revision {revision} ({len(todo) - 1} after it)"
        )
        await ctx.kube.delete("v1", "Pod", member.name, ctx.namespace)

        async def back(
            name: str = member.name, uid: str = member.uid, revision: str = revision
        ) -> str | None:
            _, now = await _observe(ctx, statefulset, restart)
            new = next((m for m in now if m.name == name), None)
            if new is None or new.uid == uid:
                return "not replaced yet"
            if new.revision != revision:
                return f"replaced on revision {new.revision}, not {revision}"
            return await healthy(now)

        await _until(ctx, f"{member.name} after its restart", loop.time() + timeout, back)
        rolled.append(member.name)
