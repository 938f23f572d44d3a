"""Periodic resyncs: one sweep over every handled resource instead of a kopf timer per resource.

A kopf timer is a task per resource that runs kopf's handler machinery (and logs a line) at every
period, even when the resync is decided from memory and does nothing: at 1000 resources and a
60 s period that alone kept several percent of a core busy and held a task per resource. The
sweep keeps, per resource, the resource as last handled (its status as written) and when it is
due; a due resource is first decided from memory in bulk, and only the others are read and
reconciled, a bounded number at a time.

What the sweep cannot see between reconciles is a change that kopf does not report as an update:
the status rewritten by someone else. The full read at least every ``FULL_READ_EVERY`` seconds
(see ``idle``) covers that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import kopf

from helm_operator.runtime.desired import Resource

log = logging.getLogger(__name__)

TICK = 1.0  # seconds between sweeps: the precision of a period
READS = 8  # resyncs that read and reconcile at a time (the rest wait for a later sweep)


class Owner(Protocol):
    """The handlers of a resource's kind, as the sweep uses them."""

    async def from_memory(self, cr: Resource) -> bool:
        """Whether the resync has nothing to do, decided without a request (and counted so)."""

    async def reread(self, cr: Resource, retry: int) -> None:
        """Read the resource and reconcile it; ``kopf.TemporaryError`` asks for an earlier retry."""


@dataclass
class Member:
    owner: Owner
    resource: Resource  # as last handled, with its status as written
    period: float
    due: float
    retry: int = 0  # reads in a row that failed


class Resyncs:
    """Which handled resources are due for a resync, and the sweep that resyncs them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, reads: int = READS) -> None:
        self.clock, self.reads = clock, reads
        self.members: dict[str, Member] = {}
        self.reading: dict[str, asyncio.Task[None]] = {}
        self.handling: set[str] = set()  # a handler of kopf's is at it: not due meanwhile

    def seen(self, key: str, owner: Owner, cr: Resource, period: float) -> None:
        """``cr`` was just handled: its next resync is a period from now."""
        due = self.clock() + period
        member = self.members.get(key)
        if member is None:
            self.members[key] = Member(owner, cr, period, due)
        else:
            member.owner, member.resource, member.period, member.due = owner, cr, period, due

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

    def forget(self, key: str) -> None:
        """No more resyncs (deleted, being deleted, or no longer selected)."""
        self.members.pop(key, None)

    def due(self) -> list[tuple[str, Member]]:
        now = self.clock()
        busy = self.reading.keys() | self.handling
        return [(k, m) for k, m in self.members.items() if m.due <= now and k not in busy]

    async def sweep(self) -> None:
        """Resync every due resource: from memory where it can, else a bounded number of reads."""
        for key, member in self.due():
            if member.period <= 0:
                continue
            if await member.owner.from_memory(member.resource):
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
