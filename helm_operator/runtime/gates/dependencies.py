"""The dependencies gate: an install or upgrade waits until what the resource depends on is ready
(``helm-operator.io/depends-on``; ``runtime.ordering`` reads it from the cluster)."""

from __future__ import annotations

from helm_operator.core.conditions import Contribution
from helm_operator.runtime import ordering
from helm_operator.runtime.desired import Resource
from helm_operator.runtime.gates.gate import Change, Hold, Pass


class Dependencies:
    name = "dependencies"
    holds = ordering.WAIT_FOR

    async def check(self, change: Change) -> Pass | Hold:
        """Also records what the resource depends on (for the order of uninstalls), whatever the
        action. Its release is not corrected while it waits: the dependency's readiness, not this
        release's, is what is in question."""
        waits = await ordering.hold(change.rt.kube, change.rt.dependents, change.cr, change.action)
        if waits is None:
            return Pass()
        outcome, look_again = waits
        return Hold(outcome, look_again)

    def idle(self, cr: Resource) -> Contribution | None:
        return None  # Ready says what it waits for; nothing of its own on the status
