"""An action's Events and its status are written at once, and both always finish."""

from __future__ import annotations

import asyncio

import pytest

from helm_operator.runtime.reconcile import _together


def test_writes_run_at_once_and_all_finish_before_the_first_error_is_raised() -> None:
    done: list[str] = []
    both_started = asyncio.Barrier(2)  # passed only while both writes are under way at once

    async def events() -> None:
        await asyncio.wait_for(both_started.wait(), 1)
        await asyncio.sleep(0.02)
        done.append("events")

    async def status() -> bool:
        await asyncio.wait_for(both_started.wait(), 1)
        raise RuntimeError("API server unreachable")

    with pytest.raises(RuntimeError, match="unreachable"):
        asyncio.run(_together([events(), status()]))
    assert done == ["events"]
