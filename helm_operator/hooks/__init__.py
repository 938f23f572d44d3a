"""Day-2 hooks: Python beside Helm for what a chart cannot express (backups, restore, failover).

This package is all a hook module imports (``helm_operator.hooks.testing`` is for its tests). A
watch names a module (``hooks: hooks/postgresqlcluster.py``) that defines one registry::

    from helm_operator.hooks import Context, Hooks, InvalidSpec

    hooks = Hooks()

    @hooks.schedule("backup", cron="spec.backup.schedule")
    async def backup(ctx: Context) -> None:
        ...

The built-ins do the work a policy asks for: ``backup.take_and_prune`` (its cleanup
``backup.remove_files``) and ``backup.restore_before_install`` (Jobs built from
``jobs.command``/``jobs.shell`` with a constant ``Script``), ``failover.keep_primary`` and
``failover.switchover``, ``verify.verify_latest`` (the newest backup restored into a throw-away
``verify.instance`` and checked), ``rolling.roll`` (a StatefulSet's members restarted one at a time,
each healthy before the next); ``shapes`` checks the spec strings that reach a Job. See
docs/day2-hooks.md for every hook kind, the context and ``status.day2``.
"""

from helm_operator.hooks.builtin import backup, failover, jobs, rolling, shapes, verify
from helm_operator.hooks.builtin.backup import Claim
from helm_operator.hooks.builtin.jobs import Container, Script, SecretKey
from helm_operator.hooks.builtin.retention import Retention, parse_age, parse_count
from helm_operator.hooks.context import Context, Day2Status, ExecFailed, KubeClient, Release
from helm_operator.hooks.errors import HookError, InvalidSpec, PermanentError, TemporaryError
from helm_operator.hooks.registry import Hooks
from helm_operator.hooks.schedule import bounded, parse_time, run_name

__all__ = [
    "Claim",
    "Container",
    "Context",
    "Day2Status",
    "ExecFailed",
    "HookError",
    "Hooks",
    "InvalidSpec",
    "KubeClient",
    "PermanentError",
    "Release",
    "Retention",
    "Script",
    "SecretKey",
    "TemporaryError",
    "backup",
    "bounded",
    "failover",
    "jobs",
    "parse_age",
    "parse_count",
    "parse_time",
    "rolling",
    "run_name",
    "shapes",
    "verify",
]
