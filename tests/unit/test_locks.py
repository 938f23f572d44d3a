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


def test_a_slot_left_early_lets_the_next_resource_of_the_kind_act_while_the_lock_is_kept() -> None:
    async def scenario() -> list[str]:
        c = Concurrency()
        c.limit("K", 1)
        order: list[str] = []
        reporting, reported = asyncio.Event(), asyncio.Event()

        async def first() -> None:
            async with c.release("K", "ns/a") as turn:
                order.append("a acts")
                turn.leave_slot()
                turn.leave_slot()  # a second time gives nothing back twice
                reporting.set()
                await reported.wait()  # a reports while b acts
                order.append("a reported")

        async def second() -> None:
            await reporting.wait()
            async with c.release("K", "ns/b"):
                order.append("b acts")
                reported.set()

        async def again() -> None:  # a's lock is still held: a second turn of a waits for it
            await reporting.wait()
            async with c.release("K", "ns/a"):
                order.append("a again")

        await asyncio.wait_for(asyncio.gather(first(), second(), again()), 5)
        assert c.queued("K") == 0
        return order

    assert asyncio.run(scenario()) == ["a acts", "b acts", "a reported", "a again"]


def test_a_slot_kept_for_the_whole_turn_is_given_back_once_at_its_end() -> None:
    async def scenario() -> bool:
        c = Concurrency()
        c.limit("K", 1)
        async with c.release("K", "ns/a"):
            pass
        async with c.release("K", "ns/b") as turn:  # the only slot came back
            turn.leave_slot()
        # Exactly one slot: a third holder gets it, a fourth must wait.
        async with c.release("K", "ns/c"):
            try:
                await asyncio.wait_for(c.release("K", "ns/d").__aenter__(), 0.05)
            except TimeoutError:
                return True
        return False

    assert asyncio.run(scenario())
