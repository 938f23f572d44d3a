"""The per-kind slots count who waits for them: that count is the queue-depth metric."""

from __future__ import annotations

import asyncio

from helm_operator.core.locks import Concurrency


def test_queued_counts_reconciles_waiting_for_a_slot_of_their_kind() -> None:
    async def scenario() -> list[int]:
        c = Concurrency()
        c.limit("K", 1)
        seen = []
        held, release = asyncio.Event(), asyncio.Event()

        async def first() -> None:
            async with c.release("K", "ns/a"):
                held.set()
                await release.wait()

        async def second() -> None:
            async with c.release("K", "ns/b"):
                seen.append(c.queued("K"))

        tasks = [asyncio.create_task(first())]
        await held.wait()
        tasks.append(asyncio.create_task(second()))
        await asyncio.sleep(0.01)
        seen.append(c.queued("K"))  # b waits for the only slot
        release.set()
        await asyncio.gather(*tasks)
        seen.append(c.queued("K"))
        return seen

    assert asyncio.run(scenario()) == [1, 0, 0]
