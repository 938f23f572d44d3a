"""Hooks are typed records and typed decorators: mypy refuses a hook whose signature is not
``async def hook(ctx: Context) -> None``, and each kind's record holds only what that kind has."""

from __future__ import annotations

import asyncio
import datetime as dt
import textwrap
from pathlib import Path

import mypy.api
import pytest

from helm_operator.hooks import Context, Hooks
from helm_operator.hooks.registry import (
    ActionHook,
    ScheduleHook,
    StageHook,
    ValidateHook,
    ValueHook,
    WatchHook,
)
from helm_operator.hooks.testing import Harness

HEADER = """
from helm_operator.hooks import Context, Hooks
hooks = Hooks()
"""

WRONG = {
    "a sync function": """
@hooks.schedule("backup", cron="spec.backup.schedule")
def sync(ctx: Context) -> None: ...
""",
    "two arguments": """
@hooks.action("backup-now")
async def two(ctx: Context, name: str) -> None: ...
""",
    "no argument": """
@hooks.before("install")
async def none() -> None: ...
""",
    "not a context": """
@hooks.validate()
async def wrong(ctx: int) -> None: ...
""",
    "a result": """
@hooks.watch("v1", "Pod")
async def result(ctx: Context) -> int:
    return 1
""",
}

RIGHT = """
@hooks.values()
async def translate(ctx: Context) -> None:
    ctx.values["x"] = 1

@hooks.after("upgrade")
async def after(ctx: Context) -> None: ...
"""


def _mypy(tmp_path: Path, body: str) -> list[str]:
    module = tmp_path / "hookmod.py"
    module.write_text(HEADER + textwrap.dedent(body))
    out, err, _ = mypy.api.run(
        [
            str(module),
            "--strict",
            "--follow-imports=silent",
            "--no-error-summary",
            "--cache-dir",
            str(tmp_path.parent / "mypy-cache"),
        ]
    )
    assert not err, err
    return [line for line in out.splitlines() if ": error:" in line]


def test_mypy_refuses_a_hook_with_the_wrong_signature(tmp_path: Path) -> None:
    assert _mypy(tmp_path, RIGHT) == []
    for what, body in WRONG.items():
        errors = _mypy(tmp_path, body)
        assert errors, f"mypy accepted a hook with {what}"
        assert all("hookmod.py" in e for e in errors), errors


def test_each_kind_is_its_own_record() -> None:
    hooks = Hooks()

    async def fn(ctx: Context) -> None: ...

    hooks.values()(fn)
    hooks.validate()(fn)
    hooks.before("uninstall", block_for=60)(fn)
    hooks.after("install")(fn)
    hooks.schedule("backup", cron="spec.backup.schedule", uses="spec.storage")(fn)
    hooks.action("backup-now", uses=("spec.backup",))(fn)
    hooks.watch("v1", "Pod", when=lambda p: True)(fn)
    kinds = [type(h) for h in hooks.hooks]
    assert kinds == [ValueHook, ValidateHook, StageHook, StageHook, ScheduleHook, ActionHook, WatchHook]
    assert [h.label for h in hooks.hooks] == [
        "values fn",
        "validate fn",
        "before_uninstall fn",
        "after_install fn",
        "schedule fn",
        "action fn",
        "watch fn",
    ]
    (before,) = hooks.around("before", "uninstall")
    assert before.block_for == 60 and hooks.around("after", "install")[0].block_for is None
    assert hooks.schedules[0].governed == ("spec.storage", "spec.backup")
    assert hooks.action_for("backup-now") is hooks.actions[0] and hooks.action_for("nope") is None
    assert hooks.actions[0].governed == ("spec.backup",)
    assert hooks.watchers[0].watched == ("v1", "Pod")
    assert not hasattr(hooks.actions[0], "cron") and not hasattr(hooks.translators[0], "stage")
    with pytest.raises(ValueError, match="stage must be one of"):
        hooks.before("deploy")  # type: ignore[arg-type]


def test_the_harness_has_a_method_per_kind() -> None:
    hooks = Hooks()
    seen: list[str] = []

    @hooks.values()
    async def translate(ctx: Context) -> None:
        ctx.values["replicas"] = 3

    @hooks.validate()
    async def check(ctx: Context) -> None:
        seen.append("validate")

    @hooks.before("install")
    async def before(ctx: Context) -> None:
        seen.append(f"before install {ctx.values.get('replicas')}")

    @hooks.schedule("backup", cron="spec.backup.schedule")
    async def backup(ctx: Context) -> None:
        seen.append(f"schedule {ctx.run}")

    @hooks.action("switchover")
    async def switchover(ctx: Context) -> None:
        seen.append(f"action {ctx.run} {ctx.argument}")

    @hooks.watch("v1", "Pod")
    async def pods(ctx: Context) -> None:
        seen.append(f"watch {[p['metadata']['name'] for p in ctx.objects]} {ctx.changed is not None}")

    resource = {
        "apiVersion": "x.io/v1",
        "kind": "Thing",
        "metadata": {"name": "db", "namespace": "ns", "uid": "u"},
        "spec": {"backup": {"schedule": "0 2 * * *"}},
    }
    h = Harness(hooks, resource)
    now = dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.UTC)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db-0", "namespace": "ns"}}

    async def drive() -> None:
        assert (await h.values()).values["replicas"] == 3
        assert (await h.validate()).ok
        assert (await h.before("install")).ok
        assert (await h.schedule("backup", now=now)).ok
        assert (await h.action("switchover", "db-1", now=now)).ok
        assert (await h.watch("pods", objects=[pod], changed=pod)).ok
        assert (await h.run("action", name="switchover", argument="db-2", now=now)).ok

    asyncio.run(drive())
    assert seen == [
        "validate",
        "before install 3",
        "schedule db-backup-202611220200",
        "action db-switchover-20261122030000 db-1",
        "watch ['db-0'] True",
        "action db-switchover-20261122030000 db-2",
    ]
