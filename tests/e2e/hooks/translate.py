"""A value translator that sets a key only while the spec asks for it (``boost: true`` → 3
replicas): when it stops, the key must leave the release too."""

from __future__ import annotations

from helm_operator.hooks import Context, Hooks

hooks = Hooks()


@hooks.values()
async def boost(ctx: Context) -> None:
    if ctx.values.pop("boost", False):
        ctx.values["replicas"] = 3
