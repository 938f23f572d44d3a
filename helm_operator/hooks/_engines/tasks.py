"""Supervision of the per-resource tasks of the hook engines (schedules, actions, watch hooks)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from helm_operator.core.locks import Concurrency
from helm_operator.release.identity import ReleaseId

log = logging.getLogger(__name__)

HOOKS_LOCK = "#hooks"  # the suffix of the lock every hook of a resource takes
Step = Callable[[], Awaitable[float | None]]  # one look; seconds until the next, None: done


@dataclass
class Tasks:
    """At most one task per (resource, what): each step runs under the release's lock (never
    beside Helm, drift correction or another hook of the resource), then waits the seconds it
    returned — or less, when woken by a change. A step ``beside_helm`` takes only the lock of
    the resource's tasks: never beside another task, but while Helm acts."""

    concurrency: Concurrency
    draining: bool = False  # the operator is stopping: nothing new starts
    _tasks: dict[tuple[str, str], asyncio.Task[None]] = field(default_factory=dict)
    _wake: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict)
    _stepping: set[tuple[str, str]] = field(default_factory=set)  # inside a step right now

    def start(self, ident: ReleaseId, what: str, step: Step, *, beside_helm: bool = False) -> None:
        """Run ``step`` as the resource's task ``what``; if that task already runs, wake it from
        its wait, so it looks again now."""
        if self.draining:
            return
        key = (ident.owner, what)
        task = self._tasks.get(key)
        if task is None or task.done():
            self._wake[key] = asyncio.Event()
            self._tasks[key] = asyncio.get_running_loop().create_task(
                self._repeat(ident, key, step, beside_helm)
            )
        else:
            self._wake[key].set()

    async def _repeat(self, ident: ReleaseId, key: tuple[str, str], step: Step, beside_helm: bool) -> None:
        """Take ``step`` under the resource's locks, then wait the seconds it returns, until it
        returns None. An error ends the task; the next reconcile starts it again."""
        wake = self._wake[key]
        try:
            while not self.draining:
                wake.clear()
                # The release's lock too unless beside Helm (Helm holds it alone), never kept
                # while waiting for a hook that runs beside Helm.
                hooks = ident.key + HOOKS_LOCK
                both = self.concurrency.both
                async with self.concurrency.lock(hooks) if beside_helm else both(ident.key, hooks):
                    if self.draining:  # stopped while waiting for the lock
                        return
                    self._stepping.add(key)
                    try:
                        wait = await step()
                    finally:
                        self._stepping.discard(key)
                if wait is None and not wake.is_set():
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), wait or 0.0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s of %s stopped (%r); the next reconcile starts it again", key[1], ident.key, exc)
        finally:
            if self._tasks.get(key) is asyncio.current_task():
                self._tasks.pop(key, None)
                self._wake.pop(key, None)

    def forget(self, owner: str) -> None:
        """Stop every task of a resource that is gone."""
        for key in [k for k in self._tasks if k[0] == owner]:
            self._tasks.pop(key).cancel()
            self._wake.pop(key, None)

    def drain(self) -> None:
        """Start nothing from now on; stop the tasks that only wait (a step in progress
        finishes; one cut short by the exit is resumed by the next operator, as after a restart)."""
        self.draining = True
        for key, task in list(self._tasks.items()):
            if key not in self._stepping:
                task.cancel()
