"""Maintenance windows: when a change to a running release may be applied.

A window opens at the fire times of a 5-field cron read in its time zone and stays open for its
duration. A watch declares them in watches.yaml (``maintenance.windows``); a resource may replace
them with an annotation (``release.windows.effective``; ``always``: no windows). No
windows at all means always open: behaviour as without the feature.

Only the time arithmetic and the parsing live here (pure); what waits for a window is decided in
``release.windows``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from helm_operator.config import cron
from helm_operator.config.durations import parse_duration

DriftOutside = Literal["correct", "report"]
ALWAYS = "always"  # the annotation's value for "no windows: apply changes at once"
_DRIFT_OUTSIDE: tuple[DriftOutside, ...] = ("correct", "report")


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not a known time zone (an IANA name such as Europe/Berlin)") from None


@dataclass(frozen=True)
class Window:
    schedule: str  # 5-field cron: when the window opens, read in ``zone``
    duration: float  # seconds it stays open
    zone: str = "UTC"

    def opened(self, now: dt.datetime) -> dt.datetime | None:
        """When the window that holds ``now`` opened (None: closed at ``now``)."""
        local = now.astimezone(_zone(self.zone))
        start = cron.fire_at_or_before(self.schedule, local)
        return start if local < start + dt.timedelta(seconds=self.duration) else None

    def next_opening(self, now: dt.datetime) -> dt.datetime:
        """The first opening strictly after ``now``."""
        return cron.fire_after(self.schedule, now.astimezone(_zone(self.zone)))

    def describe(self) -> str:
        return f"'{self.schedule}' for {_human(self.duration)} ({self.zone})"


@dataclass(frozen=True)
class Maintenance:
    """The windows changes wait for, and what drift correction does outside them."""

    windows: tuple[Window, ...] = ()
    drift: DriftOutside = "correct"  # outside a window: "correct" drift as always, or only "report" it

    @property
    def limited(self) -> bool:
        return bool(self.windows)

    def open_at(self, now: dt.datetime) -> bool:
        return not self.windows or any(w.opened(now) is not None for w in self.windows)

    def next_opening(self, now: dt.datetime) -> dt.datetime | None:
        """The next moment a window opens (None: no windows)."""
        if not self.windows:
            return None
        return min(w.next_opening(now) for w in self.windows)

    def describe(self) -> str:
        return "; ".join(w.describe() for w in self.windows) or "none (always open)"


def _human(seconds: float) -> str:
    s = int(seconds)
    parts = [(s // 3600, "h"), (s % 3600 // 60, "m"), (s % 60, "s")]
    return "".join(f"{n}{u}" for n, u in parts if n) or "0s"


class WindowError(ValueError):
    """What is wrong with a window, and where below the place it was read from."""

    def __init__(self, where: tuple[str, ...], message: str) -> None:
        super().__init__(f"{'.'.join(where)}: {message}" if where else message)
        self.where, self.message = where, message


def window(schedule: Any, duration: Any, zone: Any = "UTC") -> Window:
    """A checked window; ``WindowError`` naming the field that is wrong."""
    if not isinstance(schedule, str) or not schedule.strip():
        raise WindowError(
            ("schedule",), f"expected a 5-field cron expression ({cron.FIELDS}), got {schedule!r}"
        )
    text = " ".join(schedule.split())
    wrong = cron.problem(text)
    if wrong is not None:
        raise WindowError(("schedule",), wrong)
    try:
        seconds = parse_duration(duration)
    except ValueError:
        raise WindowError(("duration",), f"expected a duration such as 30m or 4h, got {duration!r}") from None
    if seconds <= 0:
        raise WindowError(("duration",), f"a window must stay open for some time, got {duration!r}")
    if not isinstance(zone, str) or not zone:
        raise WindowError(("timeZone",), f"expected an IANA time zone name, got {zone!r}")
    try:
        _zone(zone)
    except ValueError as exc:
        raise WindowError(("timeZone",), str(exc)) from None
    return Window(text, float(seconds), zone)


def from_config(raw: Any) -> Maintenance:
    """``maintenance:`` of a watches.yaml entry: ``{windows: [{schedule, duration, timeZone?}],
    driftOutsideWindows?: correct|report}``; ``WindowError`` names the field below it."""
    if not isinstance(raw, Mapping):
        raise WindowError((), "expected a mapping with 'windows' and optionally 'driftOutsideWindows'")
    unknown = sorted(set(raw) - {"windows", "driftOutsideWindows"})
    if unknown:
        raise WindowError((unknown[0],), "unknown field; expected windows or driftOutsideWindows")
    items = raw.get("windows")
    if not isinstance(items, list) or not items:
        raise WindowError(("windows",), "expected a non-empty list of {schedule, duration, timeZone}")
    windows = []
    for i, item in enumerate(items):
        at = f"windows[{i}]"
        if not isinstance(item, Mapping):
            raise WindowError((at,), "expected a mapping {schedule, duration, timeZone}")
        extra = sorted(set(item) - {"schedule", "duration", "timeZone"})
        if extra:
            raise WindowError((at, extra[0]), "unknown field; expected schedule, duration, timeZone")
        try:
            windows.append(window(item.get("schedule"), item.get("duration"), item.get("timeZone", "UTC")))
        except WindowError as exc:
            raise WindowError((at, *exc.where), exc.message) from None
    drift = raw.get("driftOutsideWindows", "correct")
    if drift not in _DRIFT_OUTSIDE:
        raise WindowError(("driftOutsideWindows",), f"expected correct or report, got {drift!r}")
    return Maintenance(tuple(windows), drift)


def from_annotation(text: str, base: Maintenance) -> Maintenance:
    """A resource's own windows: ``<cron> <duration> [<time zone>]``, several separated by ``;``,
    or ``always``. They replace the watch's windows (its drift rule stays); ``WindowError`` says
    which window is wrong and why."""
    text = text.strip()
    if text == ALWAYS:
        return Maintenance((), base.drift)
    windows = []
    for i, part in enumerate(p.strip() for p in text.split(";")):
        words = part.split()
        if len(words) not in (6, 7):
            raise WindowError(
                (f"window {i + 1} {part!r}",),
                f"expected '<5-field cron> <duration> [<time zone>]' (e.g. '0 2 * * 6 4h Europe/Berlin'), "
                f"or '{ALWAYS}'",
            )
        if len(words) == 7 and _a_duration(words[6]):  # a duration last is never a time zone
            raise WindowError(
                (f"window {i + 1} {part!r}",),
                f"its cron '{' '.join(words[:6])}' has 6 fields (seconds are not supported): expected "
                f"'<5-field cron> <duration> [<time zone>]' (e.g. '0 2 * * 6 4h Europe/Berlin')",
            )
        zone = words[6] if len(words) == 7 else "UTC"
        try:
            windows.append(window(" ".join(words[:5]), words[5], zone))
        except WindowError as exc:
            raise WindowError((f"window {i + 1} {part!r}", *exc.where), exc.message) from None
    return Maintenance(tuple(windows), base.drift)


def _a_duration(word: str) -> bool:
    try:
        parse_duration(word)
    except (ValueError, TypeError):
        return False
    return True
