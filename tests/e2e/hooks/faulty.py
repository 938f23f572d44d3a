"""Hooks that fail on request (``spec.fault``): how the operator reports a hook that raises or
hangs, while other resources of the kind carry on."""

from __future__ import annotations

import asyncio

from helm_operator.hooks import Context, Hooks

hooks = Hooks()


@hooks.values(timeout=2)
async def translate(ctx: Context) -> None:
    fault = ctx.spec.get("fault")
    if fault == "raise":
        raise RuntimeError("the translator broke")
    if fault == "hang":
        await asyncio.sleep(3600)
    ctx.values.pop("fault", None)
