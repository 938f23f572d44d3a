"""Schedules of scheduled hooks: validation, the next slot, and whether a run is due (pure).

A schedule is a standard 5-field cron expression (croniter) or a fixed interval, written
``@every <seconds>s``, whose slots are multiples of the interval since the Unix epoch (so they
are the same after a restart). Times are UTC. The state of a task lives in
``status.day2.schedules.<task>``, written *before* a run starts, so an operator restart resumes a
run in progress (same run name) instead of starting a second one, and runs a slot that passed
while it was down exactly once. Several missed slots collapse into one run, for the latest.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from helm_operator.config import cron
from helm_operator.config.cron import FIELDS
from helm_operator.hooks.errors import InvalidSpec

MAX_NAME = 63  # Job names end up in a pod label, limited to 63 characters
MISSED_COUNT_CAP = 1000
EVERY = "@every "
MIN_INTERVAL = 10  # seconds: a shorter interval would start runs faster than their state is written


def check_cron(expr: Any, path: str) -> str:
    """The expression, or ``InvalidSpec`` saying precisely what is wrong with it."""
    if not isinstance(expr, str) or not expr.strip():
        raise InvalidSpec(path, f"must be a 5-field cron expression ({FIELDS}), not {expr!r}")
    text = expr.strip()
    wrong = cron.problem(text)
    if wrong is not None:
        raise InvalidSpec(path, wrong)
    return text


def check_interval(seconds: Any, path: str) -> str:
    """An interval in whole seconds as the schedule ``@every <n>s``, or a precise ``InvalidSpec``."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | str):
        raise InvalidSpec(path, f"must be a whole number of seconds, not {seconds!r}")
    text = str(seconds).strip()
    if not text.isdigit():
        raise InvalidSpec(path, f"must be a whole number of seconds, not {seconds!r}")
    if int(text) < MIN_INTERVAL:
        raise InvalidSpec(path, f"{text}s is too short; at least {MIN_INTERVAL}s")
    return f"{EVERY}{int(text)}s"


def _interval(expr: str) -> int | None:
    return int(expr[len(EVERY) : -1]) if expr.startswith(EVERY) else None


def slot_after(expr: str, t: dt.datetime) -> dt.datetime:
    """The first slot strictly after ``t``."""
    step = _interval(expr)
    if step is not None:
        return dt.datetime.fromtimestamp((int(t.timestamp()) // step + 1) * step, dt.UTC)
    return cron.fire_after(expr, t)


def slot_at_or_before(expr: str, t: dt.datetime) -> dt.datetime:
    """The latest slot at or before ``t``."""
    step = _interval(expr)
    if step is not None:
        return dt.datetime.fromtimestamp(int(t.timestamp()) // step * step, dt.UTC)
    return cron.fire_at_or_before(expr, t)


def rfc3339(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(dt.UTC)
    except ValueError:
        return None


@dataclass(frozen=True)
class TaskState:
    """What ``status.day2.schedules.<task>`` says."""

    schedule: str = ""
    last: dt.datetime | None = None  # lastScheduleTime: the slot of the last run started
    next: dt.datetime | None = None  # nextScheduleTime
    active: str = ""  # the run in progress (its name), if any

    @classmethod
    def from_status(cls, raw: Mapping[str, Any] | None) -> TaskState:
        raw = raw or {}
        return cls(
            schedule=str(raw.get("schedule") or ""),
            last=parse_time(raw.get("lastScheduleTime")),
            next=parse_time(raw.get("nextScheduleTime")),
            active=str(raw.get("active") or ""),
        )


@dataclass(frozen=True)
class Decision:
    run: dt.datetime | None  # the slot to run now (None: nothing due)
    next: dt.datetime  # the slot after that
    missed: int = 0  # earlier slots that passed unrun (collapsed into ``run``)


def decide(expr: str, state: TaskState, now: dt.datetime) -> Decision:
    """Whether a slot is due at ``now``. A new or changed schedule is only armed (no run for the
    past); a slot already started (``last``) never runs twice."""
    if state.schedule != expr or state.next is None:
        return Decision(None, slot_after(expr, now))
    if now < state.next:
        return Decision(None, state.next)
    latest = slot_at_or_before(expr, now)
    following = slot_after(expr, now)
    if state.last is not None and latest <= state.last:
        return Decision(None, following)
    missed, t = 0, state.next
    while t < latest and missed < MISSED_COUNT_CAP:
        missed += 1
        t = slot_after(expr, t)
    return Decision(latest, following, missed)


_UNSAFE = re.compile(r"[^a-z0-9-]+")


def run_name(resource: str, task: str, slot: dt.datetime, seconds: bool = False) -> str:
    """``<resource>-<task>-<YYYYMMDDHHMM>`` (``…SS`` for interval schedules): the same for every
    attempt at one slot, unique across slots; shortened with a stable hash to fit a Job name."""
    stamp = slot.astimezone(dt.UTC).strftime("%Y%m%d%H%M%S" if seconds else "%Y%m%d%H%M")
    return bounded(f"{resource}-{task}", stamp)


def bounded(prefix: str, suffix: str) -> str:
    """``<prefix>-<suffix>`` as a DNS label of at most 63 characters (prefix shortened + hashed)."""
    prefix = _UNSAFE.sub("-", prefix.lower()).strip("-")
    name = f"{prefix}-{suffix}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(prefix.encode()).hexdigest()[:6]
    keep = MAX_NAME - len(suffix) - len(digest) - 2
    return f"{prefix[:keep].rstrip('-')}-{digest}-{suffix}"
