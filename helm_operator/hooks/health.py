"""The one owner of the ``Day2`` condition: it is decided from everything that contributes to it.

Value translators, ``before``/``after`` hooks, spec checks (crons, ``validate`` hooks), scheduled
runs, actions, watch hooks and a blocked uninstall each report their latest result under a name of
their own. The condition is ``False`` while any of them is failing (naming each), ``True`` once none
is: a watch hook that succeeds never hides a translator that fails. The failing ones are kept in
``status.day2.problems`` (a list, so a merge patch replaces it whole), which seeds the memory after
a restart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helm_operator.core.conditions import Contribution, Owner
from helm_operator.core.vocabulary import Condition, ConditionType, Reason

CONDITION = ConditionType.DAY2
PROBLEMS = "problems"  # key under status.day2


@dataclass(frozen=True)
class Problem:
    source: str  # who reported it: "values", "before upgrade", "schedule backup", "action", ...
    reason: str
    message: str

    def to_status(self) -> dict[str, str]:
        return {"source": self.source, "reason": self.reason, "message": self.message}


class Health:
    """The failing contributors of each resource (by owner id), in memory, seeded from status."""

    def __init__(self) -> None:
        self._failing: dict[str, dict[str, Problem]] = {}

    def seed(self, owner: str, day2: Mapping[str, Any] | None) -> None:
        """Learn what the status says is failing, the first time the resource is seen."""
        if owner in self._failing:
            return
        known: dict[str, Problem] = {}
        for p in (day2 or {}).get(PROBLEMS) or ():
            if isinstance(p, Mapping) and p.get("source"):
                source = str(p["source"])
                known[source] = Problem(source, str(p.get("reason")), str(p.get("message")))
        self._failing[owner] = known

    def report(self, owner: str, source: str, problem: tuple[str, str] | None) -> bool:
        """``source``'s latest result: a (reason, message) while it fails, None once it does not.
        Whether that changes what is failing (a new or changed problem is worth an Event)."""
        failing = self._failing.setdefault(owner, {})
        before = failing.get(source)
        if problem is None:
            failing.pop(source, None)
            return before is not None
        failing[source] = Problem(source, *problem)
        return before != failing[source]

    def failing(self, owner: str) -> list[Problem]:
        return sorted(self._failing.get(owner, {}).values(), key=lambda p: p.source)

    def forget(self, owner: str) -> None:
        self._failing.pop(owner, None)

    def condition(self, owner: str) -> Condition:
        return condition_of(self.failing(owner))

    def problems(self, owner: str) -> list[dict[str, str]]:
        return [p.to_status() for p in self.failing(owner)]

    def contribution(self, owner: str, day2: Mapping[str, Any] | None) -> Contribution:
        """``Day2``, and ``status.day2.problems`` where they differ from ``day2`` (the status's)."""
        problems = self.problems(owner)
        fields = {} if (day2 or {}).get(PROBLEMS) == problems else {"day2": {PROBLEMS: problems}}
        return Contribution(Owner.DAY2, (self.condition(owner),), fields)


def condition_of(failing: Sequence[Problem]) -> Condition:
    """``Day2``: False with the first failing source's reason and every source's message (each
    names its hook or field)."""
    if not failing:
        return Condition(
            CONDITION, True, Reason.HOOKS_SUCCEEDED, "every day-2 hook succeeded the last time it ran"
        )
    message = "; ".join(dict.fromkeys(p.message for p in failing))
    return Condition(CONDITION, False, failing[0].reason, message)
