"""What the CR's status says: kstatus conditions, the deployed release, a short history.

Pure: ``status_patch`` turns the outcome of one reconcile into the status to write. kstatus
reads ``Ready``/``Reconciling``/``Stalled`` with ``observedGeneration``; ``Released`` and
``Remediated`` say what Helm did. ``kubectl wait --for=condition=Ready`` works on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from helm_operator.core.conditions import Contribution, Owner, StatusPatch, rfc3339, status_patch_of
from helm_operator.core.vocabulary import Condition, ConditionType, Reason
from helm_operator.release.attempts import Attempts, attempts_from_status, attempts_to_status, next_attempts
from helm_operator.release.outcome import Outcome

HISTORY_MAX = 5


def status_patch(
    current: Mapping[str, Any],
    outcome: Outcome,
    generation: int,
    now: float,
    attempts: Attempts | None = None,
) -> dict[str, Any]:
    """The status fields to write after a reconcile (a merge patch of ``.status``), when the
    release's is the only contribution."""
    return status_patch_of(
        current, release_contributions(current, outcome, generation, now, attempts), generation, now
    )


def running_generation(current: Mapping[str, Any], outcome: Outcome, generation: int) -> int:
    """The generation the running release speaks for: ``generation``, except while a gate holds
    its change — then the one its revision was made from (``status.release.generation``; a status
    written before that field existed: ``observedGeneration``). ``observedGeneration`` stays there,
    so kstatus reads the held generation as in progress and ``kubectl wait --for=condition=Ready``
    waits for it; a generation that failed or waited for a dependency meanwhile was never made."""
    if not outcome.held:
        return generation
    made = made_from(current)
    return made if made is not None and made < generation else generation


def made_from(current: Mapping[str, Any]) -> int | None:
    """The generation the running release was made from, as the status records it (None: not
    recorded)."""
    made = (current.get("release") or {}).get("generation", current.get("observedGeneration"))
    return made if isinstance(made, int) and made > 0 else None


def release_contributions(
    current: Mapping[str, Any],
    outcome: Outcome,
    generation: int,
    now: float,
    attempts: Attempts | None = None,
) -> list[Contribution]:
    """The release's part of the status after a reconcile: its conditions and fields. A held change
    (``outcome.held``) is in progress (``Reconciling=True``, its reason and what it waits for) for
    this generation, while ``Ready`` and ``observedGeneration`` speak of the running release's.

    ``attempts`` is the failure memory to record; by default it is derived from the status.
    """
    ok = outcome.phase == "ready"
    stalled = outcome.phase == "stalled"
    progressing = outcome.phase in ("progressing", "failed") or outcome.held
    ready = Condition(ConditionType.READY, ok, outcome.reason, outcome.message)
    updates = [
        Condition(
            ConditionType.RECONCILING,
            progressing,
            outcome.reason,
            outcome.message if progressing else "",
        ),
        Condition(
            ConditionType.STALLED,
            stalled,
            outcome.reason if stalled else Reason.NOT_STALLED,
            outcome.message if stalled else "",
        ),
    ]
    running: list[Condition] = [ready]
    if outcome.action or (ok and not outcome.held):  # a hold is no release: it keeps the last one's
        released_ok = ok or (outcome.phase == "progressing")
        running.append(Condition(ConditionType.RELEASED, released_ok, outcome.reason, outcome.message))
    if outcome.remediation is not None:
        r = outcome.remediation
        running.append(Condition(ConditionType.REMEDIATED, r.succeeded, r.reason, r.message))
    elif ok and any(c.get("type") == ConditionType.REMEDIATED for c in current.get("conditions", [])):
        running.append(Condition(ConditionType.REMEDIATED, False, Reason.HEALTHY, "no remediation needed"))

    observed = running_generation(current, outcome, generation)
    patch: dict[str, Any] = {"observedGeneration": observed}

    previous = attempts_from_status(current)
    nxt = attempts if attempts is not None else next_attempts(previous, outcome, now)
    if nxt != previous:
        patch["lastAttempt"] = attempts_to_status(nxt) if nxt.failures else None

    rel = outcome.release
    if rel is not None:
        record = dict(current.get("release") or {})
        record.update(
            {
                "name": rel.name,
                "namespace": rel.namespace,
                "revision": rel.revision,
                "status": rel.status,
                "chart": rel.chart_name,
                "chartVersion": rel.chart_version,
                "chartRef": f"{rel.chart_name}-{rel.chart_version}",  # as `helm list` shows it
                "appVersion": rel.app_version,
                "digest": rel.digest,
            }
        )
        if outcome.action:
            record.update({"lastAction": outcome.action, "lastActionTime": rfc3339(now)})
        if ok and not outcome.held:  # the revision runs this generation's spec
            record["generation"] = generation
        patch["release"] = record
    if outcome.action:
        entry = {
            "action": outcome.action,
            "result": "Succeeded" if outcome.phase == "ready" else "Failed",
            "revision": rel.revision if rel else None,
            "digest": outcome.digest,
            "time": rfc3339(now),
        }
        patch["history"] = ([entry, *list(current.get("history") or [])])[:HISTORY_MAX]
    if observed == generation:
        return [Contribution(Owner.RELEASE, (running[0], *updates, *running[1:]), patch)]
    return [
        Contribution(Owner.RELEASE, tuple(updates)),
        Contribution(Owner.RELEASE, tuple(running), patch, generation=observed),
    ]


PROGRESS_REASONS = {
    "install": Reason.INSTALLING,
    "upgrade": Reason.UPGRADING,
    "reinstall": Reason.REINSTALLING,
    "rollback": Reason.ROLLING_BACK,
    "uninstall": Reason.UNINSTALLING,
}


def progress_patch(
    current: Mapping[str, Any], action: str, message: str, generation: int, now: float
) -> StatusPatch:
    """What the status says while a Helm action runs (kstatus: in progress for this generation):
    ``Reconciling=True`` with the action, ``Ready=Unknown``; ``kubectl wait --for=condition=Ready``
    keeps waiting until the action's outcome is written."""
    reason = PROGRESS_REASONS.get(action, Reason.PROGRESSING)
    updates = [
        Condition(ConditionType.READY, None, reason, message),
        Condition(ConditionType.RECONCILING, True, reason, message),
        Condition(ConditionType.STALLED, False, Reason.NOT_STALLED, ""),
    ]
    contribution = Contribution(Owner.RELEASE, tuple(updates), {"observedGeneration": generation})
    return status_patch_of(current, [contribution], generation, now)
