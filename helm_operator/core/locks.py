"""One writer per release, and a bounded number of reconciles per kind.

Every Helm action, drift check and day-2 hook of a release takes the release's lock, so nothing
ever acts on a release twice at once. Actions and drift checks also take a slot of their kind
(``maxConcurrentReconciles``); hooks, which may wait minutes for a backup Job, do not. A reconcile
that acted gives its slot back once Helm is done, and reports what it did under the lock alone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator

BUSY_CHECK = 0.1  # seconds an outer lock is held while the inner one is found busy (``both``)


class Slots:
    """A semaphore that knows how many wait for it: the queue depth the metrics report."""

    def __init__(self, slots: int) -> None:
        self._sem = asyncio.Semaphore(slots)
        self.waiting = 0

    async def acquire(self) -> None:
        self.waiting += 1
        try:
            await self._sem.acquire()
        finally:
            self.waiting -= 1

    def release(self) -> None:
        self._sem.release()

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        await self.acquire()
        try:
            yield
        finally:
            self.release()


class Turn:
    """A release's turn: its lock and a slot of its kind. The slot may be given back before the
    lock (``leave_slot``): what is left of the turn then only reports what was done, and the next
    resource of the kind need not wait for that."""

    def __init__(self, slots: Slots | None) -> None:
        self._slots = slots
        self._held = False

    async def take_slot(self) -> None:
        if self._slots is not None:
            await self._slots.acquire()
            self._held = True

    def leave_slot(self) -> None:
        if self._held and self._slots is not None:
            self._held = False
            self._slots.release()


class Concurrency:
    def __init__(self) -> None:
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._slots: dict[str, Slots] = {}

    def limit(self, kind_key: str, slots: int) -> None:
        """Declare how many reconciles of a kind may run at once (before any runs)."""
        self._slots[kind_key] = Slots(slots)

    def queued(self, kind_key: str) -> int:
        """Reconciles and drift checks of a kind waiting for a slot (the queue-depth metric)."""
        slots = self._slots.get(kind_key)
        return slots.waiting if slots is not None else 0

    @contextlib.asynccontextmanager
    async def release(self, kind_key: str, release_key: str) -> AsyncIterator[Turn]:
        """The release's lock, then the kind's slot: waiting for a busy release (a long backup
        hook) never holds a slot other resources of the kind could use."""
        async with self._locks[release_key]:
            turn = Turn(self._slots.get(kind_key))
            await turn.take_slot()
            try:
                yield turn
            finally:
                turn.leave_slot()

    @contextlib.asynccontextmanager
    async def both(self, outer_key: str, inner_key: str) -> AsyncIterator[None]:
        """Two locks, in the order every holder of both takes them (``outer`` first), but never
        holding ``outer`` while ``inner`` is busy: a hook that waits for another one running
        beside Helm (which holds only ``inner``, for minutes) must not keep the release's lock
        (``outer``) from a reconcile meanwhile. ``outer`` is held at most ``BUSY_CHECK`` seconds
        while ``inner`` is found taken."""
        outer, inner = self._locks[outer_key], self._locks[inner_key]
        while True:
            await outer.acquire()
            try:
                await asyncio.wait_for(inner.acquire(), BUSY_CHECK)
            except TimeoutError:
                outer.release()
                async with inner:  # wait for it to be free, holding nothing else
                    pass
                continue
            except BaseException:
                outer.release()
                raise
            break
        try:
            yield
        finally:
            inner.release()
            outer.release()

    @contextlib.asynccontextmanager
    async def lock(self, release_key: str) -> AsyncIterator[None]:
        """The release's lock alone: day-2 hooks, which may run for long, take no slot."""
        async with self._locks[release_key]:
            yield
