"""The Day2 condition decided from every contributor, and which hooks an invalid field holds."""

from __future__ import annotations

from helm_operator.hooks._engines.specs import governs as _governs
from helm_operator.hooks.health import CONDITION, Health
from helm_operator.hooks.registry import Hooks, ScheduleHook


def test_a_success_clears_only_its_own_failure() -> None:
    h = Health()
    h.seed("o", {"problems": [{"source": "values", "reason": "HookFailed", "message": "translate broke"}]})
    assert h.condition("o") == (CONDITION, False, "HookFailed", "translate broke")
    assert not h.report("o", "watch failover", None)  # never failed: nothing changes, nothing to write
    assert h.condition("o")[1] is False
    assert h.report("o", "schedule backup", ("HookFailed", "backup Job failed"))
    assert h.condition("o") == (CONDITION, False, "HookFailed", "backup Job failed; translate broke")
    assert not h.report("o", "schedule backup", ("HookFailed", "backup Job failed"))  # same: no Event
    assert h.report("o", "values", None) and h.report("o", "schedule backup", None)
    status, reason = h.condition("o")[1:3]
    assert status is True and reason == "HooksSucceeded" and h.problems("o") == []
    h.seed("o", {"problems": [{"source": "values", "reason": "x", "message": "y"}]})  # seeded once only
    assert h.problems("o") == []


def test_an_invalid_field_holds_the_hooks_that_use_it() -> None:
    hooks = Hooks()

    async def fn(ctx: object) -> None: ...

    hooks.schedule("backup", cron="spec.backup.schedule")(fn)
    hooks.action("backup-now", uses="spec.backup")(fn)
    hooks.action("switchover")(fn)
    backup, backup_now, switchover = hooks.hooks
    assert backup.governed == ("spec.backup",) and backup_now.governed == ("spec.backup",)
    assert _governs(backup, ["spec.backup.retention"]) and _governs(backup_now, ["spec.backup.s3.bucket"])
    assert _governs(backup, ["spec"])  # a check that broke without naming a field holds all of spec
    assert not _governs(backup, ["spec.backupWindow"]) and not _governs(switchover, ["spec.backup"])
    assert not _governs(ScheduleHook(fn, name="t", every="interval"), ["spec.backup"])
