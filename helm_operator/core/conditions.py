"""kstatus-style conditions: merge by type, keep the transition time where the status did not flip."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NewType

from helm_operator.core.vocabulary import Condition, ConditionType

MESSAGE_MAX = 1024


def rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str | None) -> float:
    if not text:
        return 0.0
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


def _value(status: bool | None) -> str:
    return "Unknown" if status is None else ("True" if status else "False")


def _condition(
    ctype: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int,
    now: float,
    previous: Mapping[str, Any] | None,
) -> dict[str, Any]:
    value = _value(status)
    changed = previous is None or previous.get("status") != value
    return {
        "type": str(ctype),  # plain strings in the status, never the enums
        "status": value,
        "reason": str(reason),
        "message": message[:MESSAGE_MAX],
        "observedGeneration": generation,
        "lastTransitionTime": rfc3339(now)
        if changed or previous is None
        else previous.get("lastTransitionTime", rfc3339(now)),
    }


def says(condition: Mapping[str, Any] | None, message: str) -> bool:
    """Whether a stored condition already carries ``message`` (as stored: cut at MESSAGE_MAX), so a
    repeated outcome is not announced by another Event."""
    return condition is not None and condition.get("message") == message[:MESSAGE_MAX]


def keep_transitions(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``after`` with the transition time of ``before`` wherever the status ends up unchanged (a
    condition set in several steps of one reconcile did not really transition)."""
    old = {c["type"]: c for c in before}
    out = []
    for c in after:
        prev = old.get(c["type"])
        if prev is not None and prev.get("status") == c.get("status") and prev.get("lastTransitionTime"):
            c = {**c, "lastTransitionTime": prev["lastTransitionTime"]}
        out.append(dict(c))
    return out


def merge_conditions(
    existing: Sequence[Mapping[str, Any]],
    updates: Sequence[Condition],
    generation: int,
    now: float,
) -> list[dict[str, Any]]:
    """Replace conditions by type; keep the transition time where the status did not flip."""
    by_type = {c["type"]: dict(c) for c in existing}
    for ctype, status, reason, message in updates:
        by_type[ctype] = _condition(ctype, status, reason, message, generation, now, by_type.get(ctype))
    order = [str(t) for t in ConditionType if t is not ConditionType.DAY2]
    return sorted(
        by_type.values(), key=lambda c: (order.index(c["type"]) if c["type"] in order else 99, c["type"])
    )


class Owner(StrEnum):
    """Who decides a part of the status. Each owner contributes only the conditions (and top-level
    status fields) it owns; ``compose`` is the one place where contributions become conditions."""

    RELEASE = "release"  # a reconcile's outcome (release/status.py)
    WORKLOADS = "workloads"  # the workloads' part of Ready (the drift check reads their health)
    DRIFT = "drift"
    DAY2 = "day2"  # hooks/health.py, from every hook contributor
    SCHEDULES = "schedules"  # the schedule engine: each schedule's slots and runs
    ACTIONS = "actions"  # the action engine: the request it handles and how it went
    STAGES = "stages"  # the stage engine: the after hooks still to run
    HOOK_MODULE = "hook-module"  # what a watch's hooks record through ctx.day2 (their own keys)
    ROLLOUT = "rollout"  # a watch's Rollout object: all of its status (runtime/rollouts.py)


OWNS: Mapping[Owner, frozenset[ConditionType]] = {
    Owner.RELEASE: frozenset(
        {
            ConditionType.READY,
            ConditionType.RECONCILING,
            ConditionType.STALLED,
            ConditionType.RELEASED,
            ConditionType.REMEDIATED,
            ConditionType.UPGRADE_PENDING,
            ConditionType.APPROVAL_PENDING,
        }
    ),
    Owner.WORKLOADS: frozenset({ConditionType.READY}),
    Owner.DRIFT: frozenset({ConditionType.DRIFTED}),
    Owner.DAY2: frozenset({ConditionType.DAY2}),
    **{
        o: frozenset()
        for o in (Owner.SCHEDULES, Owner.ACTIONS, Owner.STAGES, Owner.HOOK_MODULE, Owner.ROLLOUT)
    },
}
EVERY_FIELD = "*"  # an owner of a whole status (another object's)
OWNS_FIELDS: Mapping[Owner, frozenset[str]] = {
    Owner.RELEASE: frozenset(
        {"observedGeneration", "release", "history", "lastAttempt", "maintenance", "plan", "chart", "rollout"}
    ),
    Owner.WORKLOADS: frozenset(),
    Owner.DRIFT: frozenset(),
    Owner.DAY2: frozenset({"day2"}),
    Owner.SCHEDULES: frozenset({"day2"}),
    Owner.ACTIONS: frozenset({"day2"}),
    Owner.STAGES: frozenset({"day2"}),
    Owner.HOOK_MODULE: frozenset({"day2"}),
    Owner.ROLLOUT: frozenset({EVERY_FIELD}),
}
# Who owns which key of ``status.day2``: each engine its own, the health its problems; every other
# key is the hook module's (and a hook module may not write these).
OWNS_DAY2: Mapping[Owner, frozenset[str]] = {
    Owner.DAY2: frozenset({"problems"}),
    Owner.SCHEDULES: frozenset({"schedules"}),
    Owner.ACTIONS: frozenset({"lastAction"}),
    Owner.STAGES: frozenset({"afterHooksPending"}),
}


@dataclass(frozen=True)
class Contribution:
    """What one owner says about a resource: conditions, and status fields, that it owns."""

    owner: Owner
    conditions: tuple[Condition, ...] = ()
    fields: Mapping[str, Any] = field(default_factory=dict)
    # The generation its conditions speak of (None: the report's). A change a gate holds leaves
    # the release as an earlier generation made it: what describes the running release says so.
    generation: int | None = None

    def __post_init__(self) -> None:
        foreign = [str(c.type) for c in self.conditions if c.type not in OWNS[self.owner]]
        fields = OWNS_FIELDS[self.owner]
        foreign += [f for f in self.fields if f not in fields and EVERY_FIELD not in fields]
        day2 = self.fields.get("day2")
        if isinstance(day2, Mapping) and EVERY_FIELD not in fields:
            mine, taken = OWNS_DAY2.get(self.owner), frozenset().union(*OWNS_DAY2.values())
            foreign += [f"day2.{k}" for k in day2 if (k not in mine if mine is not None else k in taken)]
        if foreign:
            raise ValueError(f"{self.owner} does not own {', '.join(foreign)}")


# A merge patch of ``.status`` made from owners' contributions (``status_patch_of``,
# ``fields_patch``): the only kind of patch ``adapters.report.Reporter`` writes, so a status
# write that no owner contributed fails the type check.
StatusPatch = NewType("StatusPatch", dict[str, Any])


def fields_patch(contribution: Contribution) -> StatusPatch:
    """The merge patch of ``.status`` from a contribution of status fields alone (no conditions
    to compose): how an engine writes the part of ``status.day2`` it owns."""
    if contribution.conditions:
        raise ValueError(f"{contribution.owner}: conditions are composed by status_patch_of")
    return StatusPatch(dict(contribution.fields))


def compose(
    existing: Sequence[Mapping[str, Any]],
    contributions: Sequence[Contribution],
    generation: int,
    now: float,
) -> list[dict[str, Any]]:
    """The conditions after ``contributions``, in order (a later one decides a condition two
    owners share: the workloads' part of ``Ready`` after the release's)."""
    merged = [dict(c) for c in existing]
    for contribution in contributions:
        if contribution.conditions:
            of = generation if contribution.generation is None else contribution.generation
            merged = merge_conditions(merged, contribution.conditions, of, now)
    return merged


def status_patch_of(
    current: Mapping[str, Any],
    contributions: Sequence[Contribution],
    generation: int,
    now: float,
) -> StatusPatch:
    """The merge patch of ``.status`` from every contribution of one report: their fields, and the
    conditions composed (a condition that ends where it started keeps its transition time)."""
    patch = StatusPatch({})
    for contribution in contributions:
        patch.update(contribution.fields)
    if any(c.conditions for c in contributions):
        before = current.get("conditions") or []
        patch["conditions"] = keep_transitions(before, compose(before, contributions, generation, now))
    return patch
