"""Day-2 hooks without a cluster: schedules, retention, the loader's start-up errors, the runner's
error handling, and the PostgreSQLCluster hooks through the test harness."""

from __future__ import annotations

import asyncio
import datetime as dt
import textwrap
from pathlib import Path
from typing import Any

import pytest

from helm_operator.hooks import Context, Hooks, InvalidSpec, TemporaryError
from helm_operator.hooks.builtin.retention import Retention, parse_age, parse_count, to_prune
from helm_operator.hooks.errors import HookLoadError
from helm_operator.hooks.loader import load
from helm_operator.hooks.schedule import TaskState, check_cron, decide, run_name, slot_after
from helm_operator.hooks.testing import Harness, fail_jobs

ROOT = Path(__file__).resolve().parents[2]
UTC = dt.UTC


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


# --- schedules ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("0 2 * * * *", "has 6 field(s); a standard cron has 5"),
        ("*/5 * * *", "has 4 field(s)"),
        ("61 * * * *", "is not a valid cron expression"),
        ("0 2 * * 8", "is not a valid cron expression"),
        (5, "must be a 5-field cron expression"),
        ("", "must be a 5-field cron expression"),
    ],
)
def test_invalid_cron_is_a_precise_error(expr: Any, expected: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        check_cron(expr, "spec.backup.schedule")
    assert str(err.value).startswith("spec.backup.schedule: ")
    assert expected in str(err.value)


def test_valid_cron_and_nicknames() -> None:
    assert check_cron(" 0 2 * * * ", "x") == "0 2 * * *"
    assert check_cron("@daily", "x") == "@daily"
    assert slot_after("0 2 * * *", at("2026-11-22T02:00:00")) == at("2026-11-23T02:00:00")


def test_a_new_schedule_is_armed_not_run() -> None:
    d = decide("0 2 * * *", TaskState(), at("2026-11-22T10:00:00"))
    assert d.run is None and d.next == at("2026-11-23T02:00:00")


def test_a_changed_schedule_is_rearmed_from_now() -> None:
    state = TaskState("0 2 * * *", None, at("2026-11-23T02:00:00"))
    d = decide("*/10 * * * *", state, at("2026-11-22T10:03:00"))
    assert d.run is None and d.next == at("2026-11-22T10:10:00")


def test_due_slot_runs_once_and_the_next_is_computed_in_utc() -> None:
    state = TaskState("* * * * *", None, at("2026-11-22T10:01:00"))
    d = decide("* * * * *", state, at("2026-11-22T10:01:00.400000"))
    assert d.run == at("2026-11-22T10:01:00") and d.next == at("2026-11-22T10:02:00") and d.missed == 0
    # The same slot, seen again (another tick, or after a restart with lastScheduleTime written):
    again = TaskState("* * * * *", d.run, d.next)
    assert decide("* * * * *", again, at("2026-11-22T10:01:30")).run is None


def test_missed_windows_run_at_most_once() -> None:
    """The operator was down from 10:01 to 10:07:20: one run for 10:07, six slots reported missed."""
    state = TaskState("* * * * *", at("2026-11-22T10:00:00"), at("2026-11-22T10:01:00"))
    d = decide("* * * * *", state, at("2026-11-22T10:07:20"))
    assert d.run == at("2026-11-22T10:07:00") and d.missed == 6 and d.next == at("2026-11-22T10:08:00")


def test_restart_between_runs_neither_duplicates_nor_skips() -> None:
    """Run at 10:01, restart at 10:01:40 (state from status), next run at 10:02 exactly once."""
    expr = "* * * * *"
    first = decide(expr, TaskState(expr, None, at("2026-11-22T10:01:00")), at("2026-11-22T10:01:00.2"))
    persisted = TaskState(expr, first.run, first.next)  # what status.day2 holds across the restart
    assert decide(expr, persisted, at("2026-11-22T10:01:40")).run is None
    second = decide(expr, persisted, at("2026-11-22T10:02:00.3"))
    assert second.run == at("2026-11-22T10:02:00") and second.missed == 0


def test_run_names_are_deterministic_and_fit_a_job_name() -> None:
    slot = at("2026-11-22T02:00:00")
    assert run_name("my-database", "backup", slot) == "my-database-backup-202611220200"
    long = run_name("x" * 80, "backup", slot)
    assert len(long) <= 63 and long.endswith("-202611220200") and long == run_name("x" * 80, "backup", slot)


# --- retention ----------------------------------------------------------------------------------


def test_retention_ages_and_counts() -> None:
    assert parse_age("30d", "r") == dt.timedelta(days=30)
    assert parse_age("12h", "r") == dt.timedelta(hours=12)
    assert parse_age("4w", "r") == dt.timedelta(weeks=4)
    for bad in ("30x", "d30", "0d", "-1d", 30):
        with pytest.raises(InvalidSpec, match=r"^spec.backup.retention: .* not an age"):
            parse_age(bad, "spec.backup.retention")
    assert parse_count(3, "m") == 3
    for bad_count in (0, "3", True, 1.5):
        with pytest.raises(InvalidSpec):
            parse_count(bad_count, "spec.backup.maxBackups")


def _rec(name: str, start: str, phase: str = "Succeeded") -> dict[str, Any]:
    return {"name": name, "startTime": start, "phase": phase}


def test_prune_by_count_keeps_the_newest() -> None:
    records = [_rec(f"b{i}", f"2026-11-22T10:0{i}:00Z") for i in range(5)]
    assert to_prune(records, Retention(max_count=2), at("2026-11-22T10:10:00")) == ["b0", "b1", "b2"]


def test_prune_by_age_never_the_newest_success_nor_a_running_one() -> None:
    records = [
        _rec("old", "2026-10-01T00:00:00Z"),
        _rec("running", "2026-10-02T00:00:00Z", "Running"),
        _rec("recent", "2026-11-21T00:00:00Z"),
    ]
    assert to_prune(records, Retention(max_age=dt.timedelta(days=30)), at("2026-11-22T00:00:00")) == ["old"]
    only_old = [_rec("old", "2026-10-01T00:00:00Z")]
    assert to_prune(only_old, Retention(max_age=dt.timedelta(days=30)), at("2026-11-22T00:00:00")) == []


def test_failed_records_are_kept_a_little_for_diagnosis() -> None:
    records = [_rec(f"f{i}", f"2026-11-22T10:0{i}:00Z", "Failed") for i in range(5)]
    assert to_prune(records, Retention(max_count=1), at("2026-11-22T10:10:00")) == ["f0", "f1"]


# --- loader -------------------------------------------------------------------------------------


def _module(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "my_hooks.py"
    path.write_text("from helm_operator.hooks import Hooks\nhooks = Hooks()\n" + textwrap.dedent(body))
    return path


def test_loader_refuses_a_sync_hook_naming_file_and_function(tmp_path: Path) -> None:
    _module(tmp_path, "@hooks.after('install')\ndef notify(ctx):\n    pass\n")
    with pytest.raises(HookLoadError, match=r"my_hooks.py:3: function notify: a hook must be an `async def`"):
        load("my_hooks.py", tmp_path)


def test_loader_refuses_a_wrong_signature(tmp_path: Path) -> None:
    path = _module(tmp_path, "@hooks.before('upgrade')\nasync def check(ctx, extra):\n    pass\n")
    with pytest.raises(
        HookLoadError, match=r"function check: takes \(ctx, extra\); a hook takes exactly one"
    ):
        load(str(path), tmp_path)


def test_loader_refuses_unknown_modules_and_modules_without_hooks(tmp_path: Path) -> None:
    with pytest.raises(HookLoadError, match="hook module 'no_such_hooks_module' not found"):
        load("no_such_hooks_module", tmp_path)
    with pytest.raises(HookLoadError, match="hook file not found"):
        load("missing.py", tmp_path)
    (tmp_path / "empty.py").write_text("x = 1\n")
    with pytest.raises(HookLoadError, match=r"empty.py: defines no `Hooks\(\)` registry"):
        load("empty.py", tmp_path)
    (tmp_path / "broken.py").write_text("import no_such_dependency\n")
    with pytest.raises(HookLoadError, match=r"broken\.py: import failed: ModuleNotFoundError"):
        load("broken.py", tmp_path)


def test_loader_accepts_the_sample_modules() -> None:
    hooks = load("hooks/postgresqlcluster.py", ROOT)
    assert {h.label for h in hooks.hooks} >= {"before_uninstall final_backup", "schedule scheduled_backup"}


# --- runner and harness -------------------------------------------------------------------------

RESOURCE = {
    "apiVersion": "postgresql.example.com/v1",
    "kind": "PostgreSQLCluster",
    "metadata": {"name": "db", "namespace": "prod", "uid": "0f00eac4-1111", "annotations": {}},
    "spec": {"replicas": 1, "backup": {"schedule": "* * * * *", "retention": "30d", "maxBackups": 2}},
}


def _pg() -> Hooks:
    return load("hooks/postgresqlcluster.py", ROOT)


def test_hook_errors_become_results_without_stopping_anything() -> None:
    hooks = Hooks()

    @hooks.action("boom")
    async def boom(ctx: Context) -> None:
        raise KeyError("primary")

    @hooks.action("later")
    async def later(ctx: Context) -> None:
        raise TemporaryError("not yet", delay=5)

    @hooks.action("hang", timeout=0.2)
    async def hang(ctx: Context) -> None:
        await asyncio.sleep(30)

    h = Harness(hooks, RESOURCE)
    boomed = asyncio.run(h.run("action", name="boom"))
    assert not boomed.ok and boomed.result.reason == "HookFailed" and boomed.result.retry_after == 30
    assert "action boom raised KeyError: 'primary' at test_hooks.py:" in boomed.result.message
    retry = asyncio.run(h.run("action", name="later")).result
    assert (retry.reason, retry.retry_after, retry.message) == ("HookRetrying", 5, "action later: not yet")
    hung = asyncio.run(h.run("action", name="hang")).result
    assert hung.reason == "HookTimedOut" and "within 0.2s" in hung.message


def test_scheduled_backup_records_and_prunes_by_count() -> None:
    h = Harness(_pg(), RESOURCE)
    names = [f"db-backup-20261122100{i}" for i in range(3)]
    for name in names:
        out = asyncio.run(h.run("schedule", name="backup", run_as=name))
        assert out.ok, out.result
    records = h.resource["status"]["day2"]["backups"]
    assert [r["name"] for r in records] == names[1:]
    assert all(r["phase"] == "Succeeded" and r["location"].startswith("pvc://db-backups/") for r in records)
    assert ("delete", "Job", names[0]) in out.operations  # its Job went with the record
    assert ("PersistentVolumeClaim", "db-backups") in asyncio.run(h.run("action", name="backup-now")).created


def test_failed_final_backup_fails_the_hook_and_is_recorded() -> None:
    h = Harness(_pg(), RESOURCE, on_create=fail_jobs)
    out = asyncio.run(h.run("before", stage="uninstall"))
    assert not out.ok and out.result.permanent
    assert "backup db-final-0f00eac4 failed: BackoffLimitExceeded" in out.result.message
    assert out.day2["backups"][0]["phase"] == "Failed"
    assert ("Warning", "BackupFailed") in [(e[0], e[1]) for e in out.events]


def test_final_backup_is_skipped_on_request() -> None:
    resource = {**RESOURCE, "metadata": {**RESOURCE["metadata"]}}
    resource["metadata"]["annotations"] = {"helm-operator.io/skip-final-backup": "true"}
    out = asyncio.run(Harness(_pg(), resource).run("before", stage="uninstall"))
    assert out.ok and out.created == [] and out.events[0][1] == "FinalBackupSkipped"


def test_invalid_retention_is_reported_by_the_validate_hook() -> None:
    resource = {**RESOURCE, "spec": {"backup": {"schedule": "* * * * *", "retention": "30x"}}}
    out = asyncio.run(Harness(_pg(), resource).run("validate"))
    assert out.result.permanent and "spec.backup.retention: '30x' is not an age" in out.result.message


def test_the_harness_names_scheduled_runs_and_actions_as_the_operator_does() -> None:
    """A scheduled run or an action gets the run name and slot the operator gives it, so a hook
    test never passes on a Job named "" (which the fake, like the API server, refuses)."""
    hooks, seen = Hooks(), []

    @hooks.schedule("backup", cron="spec.backup.schedule")
    async def nightly(ctx: Context) -> None:
        seen.append((ctx.run, ctx.scheduled_time))
        await ctx.kube.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": ctx.run}})

    @hooks.schedule("snap", every="spec.backup.every")
    async def often(ctx: Context) -> None:
        seen.append((ctx.run, ctx.scheduled_time))

    @hooks.action("backup-now")
    async def now(ctx: Context) -> None:
        seen.append((ctx.run, ctx.scheduled_time))

    @hooks.action("unnamed")
    async def unnamed(ctx: Context) -> None:
        await ctx.kube.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": ""}})

    resource = {**RESOURCE, "spec": {"backup": {"schedule": "0 2 * * *", "every": 30}}}
    h = Harness(hooks, resource)
    t = at("2026-11-22T10:00:47")
    assert asyncio.run(h.run("schedule", name="backup", now=t)).created == [("Job", "db-backup-202611220200")]
    asyncio.run(h.run("schedule", name="snap", now=t))
    asyncio.run(h.run("action", name="backup-now", now=t))
    assert seen == [
        (run_name("db", "backup", at("2026-11-22T02:00:00")), at("2026-11-22T02:00:00")),
        ("db-snap-20261122100030", at("2026-11-22T10:00:30")),
        ("db-backup-now-20261122100047", None),
    ]
    assert asyncio.run(h.run("schedule", name="backup", run_as="db-backup-x")).created == [
        ("Job", "db-backup-x")
    ]
    refused = asyncio.run(h.run("action", name="unnamed")).result
    assert (
        not refused.ok and "Job '' is invalid: metadata.name must be a DNS-1123 subdomain" in refused.message
    )
    backup_now = asyncio.run(Harness(_pg(), RESOURCE).run("action", name="backup-now"))
    assert backup_now.ok and backup_now.day2["backups"][0]["name"].startswith("db-backup-now-")


def test_what_a_hook_reads_is_a_plain_read_only_dict() -> None:
    import copy
    import json

    from helm_operator.hooks.context import frozen, thawed

    spec = frozen({"backup": {"schedule": "0 2 * * *", "targets": [{"bucket": "b"}]}})
    backup = spec["backup"]
    assert isinstance(spec, dict) and isinstance(backup, dict)  # as users test it
    assert json.loads(json.dumps(spec)) == {"backup": {"schedule": "0 2 * * *", "targets": [{"bucket": "b"}]}}
    for change in (
        lambda: backup.__setitem__("schedule", "x"),
        lambda: backup.update(schedule="x"),
        lambda: backup.pop("schedule"),
        lambda: backup.setdefault("retention", "1d"),
        lambda: backup.clear(),
    ):
        with pytest.raises(TypeError, match="read-only"):
            change()
    mine = copy.deepcopy(spec)
    mine["backup"]["schedule"] = "5 * * * *"  # a copy is an ordinary dict
    assert type(mine) is dict and spec["backup"]["schedule"] == "0 2 * * *"
    assert thawed(spec)["backup"]["targets"] == [{"bucket": "b"}]
