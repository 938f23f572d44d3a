"""Periodic resyncs: one sweep over every handled resource instead of a kopf timer per resource.

A kopf timer is a task per resource that runs kopf's handler machinery (and logs a line) at every
period, even when the resync is decided from memory and does nothing: at 1000 resources and a
60 s period that alone kept several percent of a core busy and held a task per resource. The
sweep keeps, per resource, what a decision from memory needs of it as last handled (its identity,
generation, own annotations and a digest of its status as written) and when it is due; a due
resource is first decided from memory in bulk, and only the others are read and reconciled, a
bounded number at a time.

What the sweep cannot see between reconciles is a change that kopf does not report as an update:
the status rewritten by someone else. The full read at least every ``FULL_READ_EVERY`` seconds
(see ``idle``) covers that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Protocol

import kopf

from helm_operator.core.naming import ANNOTATION_PREFIX
from helm_operator.runtime.desired import Resource
from helm_operator.runtime.settled import status_digest

log = logging.getLogger(__name__)

TICK = 1.0  # seconds between sweeps: the precision of a period
READS = 8  # resyncs that read and reconcile at a time (the rest wait for a later sweep)


class Owner(Protocol):
    """The handlers of a resource's kind, as the sweep uses them."""

    async def from_memory(self, cr: Resource, status: str) -> bool:
        """Whether the resync has nothing to do, decided without a request (and counted so);
        ``status``: the digest of the status as last written."""

    async def reread(self, cr: Resource, retry: int) -> None:
        """Read the resource and reconcile it; ``kopf.TemporaryError`` asks for an earlier retry."""


@dataclass
class Member:
    owner: Owner
    resource: Resource  # as last handled: no spec, no status, only the operator's own annotations
    status: str  # digest of its status as written (the status itself is a few KiB a resource)
    period: float
    due: float
    retry: int = 0  # reads in a row that failed


def kept(cr: Resource) -> Resource:
    """What a resync keeps of a handled resource: a spec, a status or another tool's annotation
    (``kubectl apply``'s copy of the whole object) is read afresh when a resync needs it."""
    own = {k: v for k, v in cr.annotations.items() if k.startswith(ANNOTATION_PREFIX)}
    return replace(cr, spec={}, status={}, annotations=own)


class Resyncs:
    """Which handled resources are due for a resync, and the sweep that resyncs them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, reads: int = READS) -> None:
        self.clock, self.reads = clock, reads
        self.members: dict[str, Member] = {}
        self.reading: dict[str, asyncio.Task[None]] = {}
        self.handling: set[str] = set()  # a handler of kopf's is at it: not due meanwhile

    def seen(self, key: str, owner: Owner, cr: Resource, period: float) -> None:
        """``cr`` was just handled: its next resync is a period from now."""
        due, resource, status = self.clock() + period, kept(cr), status_digest(cr.status)
        member = self.members.get(key)
        if member is None:
            self.members[key] = Member(owner, resource, status, period, due)
        else:
            member.owner, member.resource, member.status = owner, resource, status
            member.period, member.due = period, due

    @contextlib.contextmanager
    def handled(self, key: str) -> Iterator[None]:
        """A change handler runs for ``key``: no resync until a period after it ends (a reconcile
        queued behind others must not be resynced, and queued again, while it waits)."""
        self.handling.add(key)
        try:
            yield
        finally:
            self.handling.discard(key)
            if (member := self.members.get(key)) is not None:
                member.due = self.clock() + member.period

    def soon(self, keys: Iterable[str]) -> None:
        """Resync these at the next sweep (what they waited for ended: an aborted rollout)."""
        now = self.clock()
        for key in keys:
            if (member := self.members.get(key)) is not None:
                member.due = min(member.due, now)

    def forget(self, key: str) -> None:
        """No more resyncs (deleted, being deleted, or no longer selected)."""
        self.members.pop(key, None)

    async def settle(self, key: str) -> None:
        """Until a read of ``key`` in flight has finished, its reconcile included: it runs beside
        kopf's handlers, and one that lets the resource go (a drain, leaving the selector) must
        not be followed by a reconcile still acting, and keeping state, for it."""
        task = self.reading.get(key)
        if task is not None:
            await asyncio.wait([task])

    def due(self) -> list[tuple[str, Member]]:
        now = self.clock()
        busy = self.reading.keys() | self.handling
        return [(k, m) for k, m in self.members.items() if m.due <= now and k not in busy]

    async def sweep(self) -> None:
        """Resync every due resource: from memory where it can, else a bounded number of reads."""
        for key, member in self.due():
            if member.period <= 0:
                continue
            if await member.owner.from_memory(member.resource, member.status):
                member.due = self.clock() + member.period
            elif len(self.reading) < self.reads:
                self.reading[key] = asyncio.create_task(self._reread(key, member))

    async def _reread(self, key: str, member: Member) -> None:
        delay = member.period
        try:
            await member.owner.reread(member.resource, member.retry)
            member.retry = 0
        except kopf.TemporaryError as exc:
            member.retry += 1
            delay = exc.delay if exc.delay is not None else delay
        except Exception:
            member.retry += 1
            log.exception("resync of %s failed", key)
        finally:
            self.reading.pop(key, None)
        if self.members.get(key) is member:  # not forgotten meanwhile
            member.due = self.clock() + delay

    async def run(self) -> None:
        """Sweep every ``TICK`` seconds, for as long as the operator runs."""
        while True:
            try:
                await self.sweep()
            except Exception:  # one bad decision must not end every later resync
                log.exception("resync sweep failed")
            await asyncio.sleep(TICK)

    async def stop(self) -> None:
        """Let the reads in flight finish (a reconcile is never cut short by its resync)."""
        pending = list(self.reading.values())
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)  # each logged its own failure
