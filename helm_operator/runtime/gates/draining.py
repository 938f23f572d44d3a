"""The draining gate: no Helm action starts while the operator shuts down (one that runs
finishes; the next replica or start takes the change)."""

from __future__ import annotations

from helm_operator.core.conditions import Contribution
from helm_operator.core.vocabulary import Reason
from helm_operator.release.outcome import Outcome
from helm_operator.release.state import Action
from helm_operator.runtime.desired import Resource
from helm_operator.runtime.gates.gate import Change, Hold, Pass

RETRY = 5.0  # seconds: if the process lives on after all (a shutdown that did not finish)


class Draining:
    name = "draining"
    holds = frozenset(a for a in Action if a.helm)

    async def check(self, change: Change) -> Pass | Hold:
        if not (change.rt.draining and change.action.helm):
            return Pass()
        outcome = Outcome("progressing", Reason.SHUTTING_DOWN, "operator is shutting down")
        return Hold(outcome, RETRY, told_by=None, retry=True)

    def idle(self, cr: Resource) -> Contribution | None:
        return None
