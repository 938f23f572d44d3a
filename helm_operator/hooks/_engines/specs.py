"""The spec fields the hooks use, checked after each reconcile, and what an invalid one holds.

A schedule's cron or interval is checked by the engine; ``validate`` hooks check the rest and name
the field (``InvalidSpec("spec.backup.target", …)``). An invalid field holds only the hooks it
governs (:attr:`Hook.governed`): the schedules in its section, the actions that declare ``uses=``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helm_operator.config.watches import Watch
from helm_operator.core.vocabulary import Reason
from helm_operator.hooks._engines.services import EngineServices
from helm_operator.hooks._runner import run
from helm_operator.hooks.context import lookup
from helm_operator.hooks.errors import InvalidSpec
from helm_operator.hooks.registry import Hook, ScheduleHook
from helm_operator.hooks.schedule import check_cron, check_interval


def schedule_of(hook: ScheduleHook, body: Mapping[str, Any]) -> str | None:
    """The schedule a resource gives a task (cron, or ``@every Ns``), None if it gives none;
    ``InvalidSpec`` if it is wrong."""
    path = hook.path
    raw = lookup(body, path)
    if raw is None or (hook.every and raw in (0, "0")):  # an interval of 0: off
        return None
    return check_cron(raw, path) if hook.cron else check_interval(raw, path)


def governs(hook: Hook, invalid: Sequence[str]) -> bool:
    """Whether an invalid field lies in (or contains) a field the hook depends on."""
    return any(
        f == g or f.startswith(g + ".") or g.startswith(f + ".") for f in invalid for g in hook.governed
    )


@dataclass
class Specs:
    shared: EngineServices

    async def check(self, watch: Watch, body: Mapping[str, Any], owner: str) -> list[str]:
        """Check the spec fields the hooks use, tell the health what fails, and return the
        dotted fields found invalid."""
        hooks = self.shared.of(watch)
        health = self.shared.health
        invalid: list[str] = []
        for hook in hooks.schedules:
            source = f"schedule {hook.name} (spec)"
            try:
                schedule_of(hook, body)
                health.report(owner, source, None)
            except InvalidSpec as exc:
                invalid.append(exc.path)
                health.report(owner, source, (Reason.INVALID_SPEC, str(exc)))
        for check in hooks.validators:
            result = await run(check, self.shared.context(watch, body))
            health.report(owner, f"validate {getattr(check.fn, '__name__', check.label)}", result.problem)
            if result.problem is not None:
                invalid.append(result.field or "spec")  # a check that broke holds all that uses spec
        return invalid
