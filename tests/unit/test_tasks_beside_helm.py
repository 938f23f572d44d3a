"""A hook task waits for Helm (the release's lock) unless it runs ``beside_helm``; either way two
tasks of one resource never run at once."""

from __future__ import annotations

import asyncio
import contextlib

from helm_operator.core.locks import Concurrency
from helm_operator.hooks._engines.tasks import Tasks
from helm_operator.hooks.registry import Hooks
from helm_operator.release.identity import ReleaseId

IDENT = ReleaseId("d", "ns", "owner-of-d")


async def _ran_while_helm_holds_the_lock(beside_helm: bool) -> bool:
    concurrency = Concurrency()
    tasks = Tasks(concurrency)
    ident = IDENT
    ran = asyncio.Event()

    async def step() -> float | None:
        ran.set()
        return None

    async with concurrency.lock(ident.key):  # Helm acting on the release
        tasks.start(ident, "watch/elect", step, beside_helm=beside_helm)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ran.wait(), 0.3)
        during = ran.is_set()
    await asyncio.wait_for(ran.wait(), 1.0)  # runs once Helm is done, in any case
    return during


def test_a_task_waits_for_helm_unless_it_runs_beside_it() -> None:
    assert asyncio.run(_ran_while_helm_holds_the_lock(beside_helm=False)) is False
    assert asyncio.run(_ran_while_helm_holds_the_lock(beside_helm=True)) is True


def test_tasks_beside_helm_still_never_overlap_another_task_of_the_resource() -> None:
    async def main() -> list[str]:
        tasks = Tasks(Concurrency())
        ident = IDENT
        trace: list[str] = []

        def step(name: str):  # type: ignore[no-untyped-def]
            async def run() -> float | None:
                trace.append(f"{name}+")
                await asyncio.sleep(0.05)
                trace.append(f"{name}-")
                return None

            return run

        tasks.start(ident, "schedule/backup", step("backup"))
        tasks.start(ident, "watch/elect", step("elect"), beside_helm=True)
        await asyncio.sleep(0.3)
        return trace

    trace = asyncio.run(main())
    assert sorted(trace) == ["backup+", "backup-", "elect+", "elect-"]
    assert trace[0][:-1] == trace[1][:-1] and trace[2][:-1] == trace[3][:-1], trace


def test_the_decorator_records_beside_helm() -> None:
    hooks = Hooks()

    @hooks.watch("v1", "Pod", beside_helm=True)
    async def elect(ctx: object) -> None: ...

    @hooks.watch("v1", "Pod")
    async def other(ctx: object) -> None: ...

    assert [h.beside_helm for h in hooks.watchers] == [True, False]
