"""Day-2 hooks: Python beside Helm for what a chart cannot express (backups, restore, failover).

A watch names a module (``hooks: hooks/postgresqlcluster.py``) that defines one registry::

    from helm_operator.hooks import Context, Hooks, InvalidSpec

    hooks = Hooks()

    @hooks.schedule("backup", cron="spec.backup.schedule")
    async def backup(ctx: Context) -> None:
        ...

See README.md, "Day-2 hooks", for every hook kind, the context and ``status.day2``.
"""

from helm_operator.hooks.context import Context, Day2Status, KubeClient, Release
from helm_operator.hooks.errors import HookError, InvalidSpec, PermanentError, TemporaryError
from helm_operator.hooks.registry import Hooks
from helm_operator.hooks.schedule import bounded, run_name

__all__ = [
    "Context",
    "Day2Status",
    "HookError",
    "Hooks",
    "InvalidSpec",
    "KubeClient",
    "PermanentError",
    "Release",
    "TemporaryError",
    "bounded",
    "run_name",
]
