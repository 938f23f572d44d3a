"""After hooks that ask to be called again are called again without Helm, and a stage hook that
goes ``alone`` keeps the resource's beside-Helm watch hooks out while it acts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from helm_operator.config.charts import ChartRef
from helm_operator.config.watches import Watch
from helm_operator.core.locks import Concurrency
from helm_operator.hooks import Context, Hooks, PermanentError, TemporaryError
from helm_operator.hooks._engines.tasks import HOOKS_LOCK
from helm_operator.hooks.day2 import Day2

WATCH = Watch("g", "v1", "Tiny", ChartRef("tiny", Path("/charts/tiny")), "tinies", "Namespaced")
BODY: dict[str, Any] = {"apiVersion": "g/v1", "kind": "Tiny", "metadata": {"name": "a", "namespace": "ns"}}


def engine(hooks: Hooks, concurrency: Concurrency | None = None, reporter: Any = None) -> Day2:
    return Day2({WATCH.key: hooks}, kube=None, reporter=reporter, concurrency=concurrency or Concurrency())  # type: ignore[arg-type]


def test_an_after_hook_that_asks_again_is_due_after_its_delay_and_forgotten_once_it_succeeds() -> None:
    hooks, calls = Hooks(), []

    @hooks.after("upgrade")
    async def finish(ctx: Context) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise TemporaryError("a member is still restarting", delay=0.2)

    day2 = engine(hooks)
    assert day2.after_due(WATCH, BODY) is None
    first = asyncio.run(day2.around("after", "upgrade", WATCH, BODY, {}, None))
    assert not first.ok and first.waiting
    stage, wait = day2.after_due(WATCH, BODY) or ("", -1.0)
    assert stage == "upgrade" and 0.1 < wait <= 0.2
    assert asyncio.run(day2.around("after", "upgrade", WATCH, BODY, {}, None)).ok
    assert day2.after_due(WATCH, BODY) is None and len(calls) == 2


def test_a_permanent_failure_waits_for_a_change_and_a_before_hook_is_never_due() -> None:
    hooks = Hooks()

    @hooks.after("install")
    async def broken(ctx: Context) -> None:
        raise PermanentError("needs a change of the spec")

    @hooks.before("upgrade")
    async def early(ctx: Context) -> None:
        raise TemporaryError("not yet", delay=1)

    day2 = engine(hooks)
    assert not asyncio.run(day2.around("after", "install", WATCH, BODY, {}, None)).ok
    assert not asyncio.run(day2.around("before", "upgrade", WATCH, BODY, {}, None)).ok
    assert day2.after_due(WATCH, BODY) is None


def test_a_stage_hook_alone_holds_the_lock_that_watch_hooks_beside_helm_take() -> None:
    hooks, seen = Hooks(), []
    concurrency = Concurrency()
    day2 = engine(hooks, concurrency)
    key = day2.shared.ident(WATCH, BODY).key + HOOKS_LOCK

    async def watch_step() -> None:  # what a beside-Helm watch hook's task takes (tasks.py)
        async with concurrency.lock(key):
            seen.append("watch")

    @hooks.after("upgrade")
    async def move_primary(ctx: Context) -> None:
        async with ctx.alone():
            task = asyncio.create_task(watch_step())
            await asyncio.sleep(0.05)
            seen.append("moved")  # the watch step has waited
        await task

    async def main() -> None:
        assert (await day2.around("after", "upgrade", WATCH, BODY, {}, None)).ok

    asyncio.run(main())
    assert seen == ["moved", "watch"]
    # Outside a stage hook (no lock to take) alone() changes nothing.
    ctx = day2.context(WATCH, BODY)

    async def plain() -> None:
        async with ctx.alone():
            seen.append("plain")

    asyncio.run(plain())
    assert seen[-1] == "plain"


class Recorded:
    """The status patches and Events a reporter would send."""

    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    async def status(self, ref: Any, plural: str, patch: dict[str, Any]) -> None:
        self.patches.append(patch)

    async def events(self, ref: Any, events: Any) -> None:
        pass


def test_after_hooks_left_unfinished_are_in_the_status_and_a_new_process_runs_them_at_once() -> None:
    hooks, calls = Hooks(), []

    @hooks.after("upgrade")
    async def finish(ctx: Context) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise TemporaryError("a member is still restarting", delay=30)

    reporter = Recorded()
    first = engine(hooks, reporter=reporter)
    assert not asyncio.run(first.around("after", "upgrade", WATCH, BODY, {}, None)).ok
    assert reporter.patches == [{"day2": {"afterHooksPending": "upgrade"}}]

    # Another process (restarted, or the shard the resource moved to) knows nothing but the status.
    pending = {**BODY, "status": {"day2": {"afterHooksPending": "upgrade"}}}
    second = engine(hooks, reporter=reporter)
    assert second.after_due(WATCH, pending) == ("upgrade", 0.0)
    assert asyncio.run(second.around("after", "upgrade", WATCH, pending, {}, None)).ok
    assert reporter.patches[-1] == {"day2": {"afterHooksPending": None}} and len(calls) == 2
    assert second.after_due(WATCH, {**BODY, "status": {"day2": {"afterHooksPending": None}}}) is None

    # Nothing recorded, or a value that names no stage: nothing to run again.
    third = engine(hooks, reporter=reporter)
    assert third.after_due(WATCH, BODY) is None
    odd = {
        **BODY,
        "metadata": {"name": "b", "namespace": "ns"},
        "status": {"day2": {"afterHooksPending": "x"}},
    }
    assert third.after_due(WATCH, odd) is None
