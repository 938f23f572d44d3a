"""Restart the chart's StatefulSet members one at a time after an upgrade, ``spec.primary`` last;
a member whose Pod says ``example.com/healthy: "false"`` holds the roll (as a lagging replica
would); the primary hands over to a restarted member before it goes."""

from __future__ import annotations

from collections.abc import Sequence

from helm_operator.hooks import Context, Hooks, rolling

hooks = Hooks()


@hooks.after("upgrade", timeout=240)
async def roll_members(ctx: Context) -> None:
    async def check(pod: str) -> str | None:
        found = await ctx.kube.get("v1", "Pod", pod, ctx.namespace)
        annotations = ((found or {}).get("metadata") or {}).get("annotations") or {}
        return "marked unhealthy" if annotations.get("example.com/healthy") == "false" else None

    primary = ctx.spec.get("primary")

    async def handover(member: str, current: Sequence[str]) -> None:
        if member == primary:  # a switchover would go here: to one already on the new revision
            await ctx.event("PrimaryMoved", f"{member} hands over to one of {', '.join(sorted(current))}")

    await rolling.roll(
        ctx, f"{ctx.release_name}-members", check=check, last=primary, handover=handover, timeout=120
    )
