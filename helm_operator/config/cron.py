"""Standard 5-field cron expressions (croniter): what is wrong with one, and its fire times.

Shared by the day-2 schedules and the maintenance windows, so both accept and refuse the same
expressions with the same words. Times keep the zone they are given in: a cron read in a zone
fires at that zone's wall-clock times.
"""

from __future__ import annotations

import datetime as dt

from croniter import croniter

FIELDS = "minute hour day-of-month month day-of-week"
NICKNAMES = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})


def problem(text: str) -> str | None:
    """What is wrong with ``text`` as a cron expression (None: nothing)."""
    if text in NICKNAMES:
        return None
    fields = text.split()
    if len(fields) != 5:
        extra = " (seconds or years are not supported)" if len(fields) > 5 else ""
        return f"{text!r} has {len(fields)} field(s); a standard cron has 5: {FIELDS}{extra}"
    try:
        croniter(text, dt.datetime(2000, 1, 1, tzinfo=dt.UTC)).get_next(dt.datetime)
    except (ValueError, KeyError) as exc:  # croniter's errors subclass ValueError
        return f"{text!r} is not a valid cron expression: {exc}"
    return None


def fire_after(expr: str, t: dt.datetime) -> dt.datetime:
    """The first fire time strictly after ``t``."""
    nxt: dt.datetime = croniter(expr, t).get_next(dt.datetime)
    return nxt.replace(fold=0)


def fire_at_or_before(expr: str, t: dt.datetime) -> dt.datetime:
    """The latest fire time at or before ``t``."""
    if croniter.match(expr, t.replace(second=0, microsecond=0)) and t.second == 0 and t.microsecond == 0:
        return t
    prev: dt.datetime = croniter(expr, t).get_prev(dt.datetime)
    return prev.replace(fold=0)
