"""Failure memory: consecutive failures per desired digest, kept in the CR status for backoff.

A failure is remembered for the digest (chart and values) *and* the context that decided it (the
watch's tenant rules and Helm settings, the operator's version, the retry annotation): fixing the
operator's configuration, upgrading the operator or annotating the resource tries it again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from helm_operator.core.conditions import parse_rfc3339, rfc3339
from helm_operator.core.vocabulary import Reason
from helm_operator.release.outcome import Outcome


@dataclass(frozen=True)
class Attempts:
    """Failure memory kept in the CR status: consecutive failures for one digest."""

    digest: str | None = None
    failures: int = 0
    last_attempt: float = 0.0
    permanent: bool = False  # the failure cannot go away without a change (e.g. the chart fails to render)
    action: str | None = None
    reason: str | None = None
    context: str | None = None  # what else decided the failures (see ``runtime.desired.context_of``)

    def applies_to(self, context: str) -> Attempts:
        """This memory if it was made in ``context``, else none (a memory from before contexts
        were recorded counts as made in any)."""
        return self if self.context in (None, context) else Attempts()


def next_attempts(previous: Attempts, outcome: Outcome, now: float, context: str | None = None) -> Attempts:
    """The failure memory after an outcome: count failures per digest and context, forget them on
    success."""
    if outcome.phase == "failed" or (outcome.permanent and outcome.digest):
        same = previous.digest == outcome.digest and previous.context == context
        failures = (previous.failures if same else 0) + 1
        return Attempts(
            outcome.digest,
            failures,
            float(int(now)),
            outcome.permanent,
            outcome.action,
            str(outcome.reason),  # a plain string, as it is read back from the status
            context,
        )
    if outcome.phase == "ready":
        return Attempts()
    return previous


def awaiting_tests(applied: Outcome, previous: Attempts, digest: str | None) -> Outcome:
    """A change Helm applied whose chart tests run next: in progress, not ready. When it retries a
    change that failed, it says which try this is and why the last one failed: a rollout that halts
    meanwhile lists its members' messages, and "its tests run next" alone hides the failure."""
    said = f"{applied.message}; its tests run next"
    if previous.digest == digest and previous.failures > 0 and previous.reason:
        said += f" (try {previous.failures + 1}; the last failed: {previous.reason})"
    return dataclasses.replace(applied, phase="progressing", reason=Reason.TEST_PENDING, message=said)


def attempts_to_status(a: Attempts) -> dict[str, Any]:
    return {
        "digest": a.digest,
        "failures": a.failures,
        "time": rfc3339(a.last_attempt),
        "action": a.action,
        "reason": a.reason,
        "permanent": a.permanent,
        "context": a.context,
    }


def attempts_from_status(current: Mapping[str, Any]) -> Attempts:
    last = current.get("lastAttempt") or {}
    return Attempts(
        digest=last.get("digest"),
        failures=int(last.get("failures", 0)),
        last_attempt=parse_rfc3339(last.get("time")),
        permanent=bool(last.get("permanent", False)),
        action=last.get("action"),
        reason=last.get("reason"),
        context=last.get("context"),
    )
