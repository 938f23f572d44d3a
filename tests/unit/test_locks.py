"""The per-kind slots count who waits for them (the queue-depth metric); a hook never holds the
release while it waits for one that runs beside Helm."""

from __future__ import annotations

import asyncio
import contextlib

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


def test_a_hook_waiting_for_one_beside_helm_never_holds_the_release_meanwhile() -> None:
    """``both``: while the inner lock (a hook running beside Helm) is held, a task waiting for both
    leaves the release's lock free for a reconcile; it runs once the inner one is let go."""

    async def run() -> list[str]:
        c, seen = Concurrency(), []
        inner_free = asyncio.Event()

        async def beside_helm() -> None:
            async with c.lock("r#hooks"):
                seen.append("beside Helm")
                await inner_free.wait()

        async def hook() -> None:
            async with c.both("r", "r#hooks"):
                seen.append("hook")

        async def reconcile() -> None:
            async with c.release("kind", "r"):
                seen.append("reconcile")

        first = asyncio.create_task(beside_helm())
        await asyncio.sleep(0)
        waiting = asyncio.create_task(hook())
        await asyncio.sleep(0.3)  # the hook has found the inner lock busy
        await asyncio.wait_for(reconcile(), 1.0)  # not blocked by the waiting hook
        inner_free.set()
        await asyncio.wait_for(asyncio.gather(first, waiting), 2.0)
        return seen

    assert asyncio.run(run()) == ["beside Helm", "reconcile", "hook"]


def test_both_locks_are_held_together_and_let_go_on_an_error() -> None:
    async def run() -> tuple[bool, bool, bool, bool]:
        c = Concurrency()
        with contextlib.suppress(RuntimeError):
            async with c.both("r", "r#hooks"):
                held = (c._locks["r"].locked(), c._locks["r#hooks"].locked())
                raise RuntimeError("the step failed")
        return (*held, c._locks["r"].locked(), c._locks["r#hooks"].locked())

    assert asyncio.run(run()) == (True, True, False, False)
