"""One writer per release, and a bounded number of reconciles per kind.

Every Helm action, drift check and (later) day-2 hook of a release takes the release's lock, and
the slot of its kind (``maxConcurrentReconciles``), so nothing ever acts on a release twice at once
and drift checks count against the same limit as reconciles.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator


class Concurrency:
    def __init__(self) -> None:
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._slots: dict[str, asyncio.Semaphore] = {}

    def limit(self, kind_key: str, slots: int) -> None:
        """Declare how many reconciles of a kind may run at once (before any runs)."""
        self._slots[kind_key] = asyncio.Semaphore(slots)

    @contextlib.asynccontextmanager
    async def slot(self, kind_key: str) -> AsyncIterator[None]:
        sem = self._slots.get(kind_key)
        if sem is None:
            yield
            return
        async with sem:
            yield

    @contextlib.asynccontextmanager
    async def release(self, kind_key: str, release_key: str) -> AsyncIterator[None]:
        """The kind's slot, then the release's lock."""
        async with self.slot(kind_key), self._locks[release_key]:
            yield
