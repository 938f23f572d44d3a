"""Hooks that fail on request (``spec.fault``, ``spec.backup``, ``spec.uninstall``): how the
operator reports a hook that raises, hangs or waits, while other resources and other hooks of the
same resource carry on."""

from __future__ import annotations

import asyncio

from helm_operator.hooks import Context, Hooks, InvalidSpec, PermanentError, TemporaryError

hooks = Hooks()


@hooks.values(timeout=2)
async def translate(ctx: Context) -> None:
    fault = ctx.spec.get("fault")
    if fault == "raise":
        raise RuntimeError("the translator broke")
    if fault == "hang":
        await asyncio.sleep(3600)
    ctx.values.pop("fault", None)


# Day-2 parts that each look at a spec field of their own, for the Day2 condition's ownership:
# nothing below does anything for a resource without those fields.


@hooks.validate()
async def check(ctx: Context) -> None:
    if (ctx.spec.get("backup") or {}).get("target") == "":
        raise InvalidSpec("spec.backup.target", "must not be empty")


@hooks.schedule("tick", every="spec.backup.every")
async def tick(ctx: Context) -> None:
    run, tries = (ctx.day2.get("attempt") or ["", 0])[:2]
    tries = tries + 1 if run == ctx.run else 1
    ctx.day2["attempt"] = [ctx.run, tries]
    if (ctx.spec.get("backup") or {}).get("slow") and tries < 3:  # a run that takes three looks
        raise TemporaryError("not done yet", delay=3)
    ctx.day2["ticks"] = int(ctx.day2.get("ticks") or 0) + 1


@hooks.action("ping")  # governed by no field: runs whatever the backup section says
async def ping(ctx: Context) -> None:
    ctx.day2["pinged"] = ctx.argument


@hooks.action("backup-now", uses="spec.backup")
async def backup_now(ctx: Context) -> None:
    ctx.day2["backedUp"] = ctx.run


@hooks.watch("v1", "ConfigMap")
async def config_seen(ctx: Context) -> None:
    ctx.day2["configMaps"] = len(ctx.objects)


@hooks.watch("v1", "ConfigMap", beside_helm=True, timeout=300)
async def slow_look(ctx: Context) -> None:
    """With ``spec.slowLook``: runs beside Helm (outside the release's lock) until the resource is
    annotated ``test.helm-operator.io/end-look``, then fails; meanwhile the reconcile may write
    conditions, which its report must not put back as it read them."""
    if not ctx.spec.get("slowLook"):
        return
    ctx.day2["looking"] = ctx.resource["metadata"]["generation"]
    await ctx.day2.save()
    me = (ctx.resource["apiVersion"], ctx.resource["kind"], ctx.resource["metadata"]["name"], ctx.namespace)
    while True:
        now = await ctx.kube.get(*me)
        if now is None or "test.helm-operator.io/end-look" in (now["metadata"].get("annotations") or {}):
            break
        await asyncio.sleep(0.5)
    raise PermanentError("the slow look failed")


@hooks.before("uninstall")
async def hold_deletion(ctx: Context) -> None:
    how = ctx.spec.get("uninstall")
    if how == "refuse":
        ctx.day2["refusals"] = int(ctx.day2.get("refusals") or 0) + 1
        raise PermanentError("refusing to uninstall, as the spec asks")
    if how == "wait" and ctx.annotations.get("test.helm-operator.io/saved") != "true":
        ctx.day2["waits"] = int(ctx.day2.get("waits") or 0) + 1
        raise TemporaryError("the final copy is still being saved", delay=3)
