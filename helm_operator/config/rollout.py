"""A staged rollout policy: how a change of the whole fleet of a watch (a new chart version, or
changed ``overrideValues``) reaches its resources wave by wave.

``rollout:`` of a watches.yaml entry::

    rollout:
      waves:
        - {name: canary, selector: {matchLabels: {tier: canary}}}
        - {name: quarter, percent: 25}
        - {name: all, percent: 100}
      minReadySeconds: 30        # a wave counts once all of it was Ready this long
      maxFailures: 0             # failed resources a wave tolerates; one more halts the rollout
      pauseBetweenWaves: 0s
      progressDeadline: 10m      # an admitted resource not Ready on the new version by then failed
      test: true                 # also run the chart's `helm test` hooks after each admitted upgrade

Only parsing and checks live here (pure); the waves are assigned in ``release.rollout``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from helm_operator.config.durations import parse_duration

_FIELDS = ("waves", "minReadySeconds", "maxFailures", "pauseBetweenWaves", "progressDeadline", "test")
_WAVE_FIELDS = ("name", "selector", "percent")
REST = "rest"  # the wave that takes what the declared waves leave


class RolloutError(ValueError):
    """What is wrong with a policy, and the field below ``rollout`` it is in."""

    def __init__(self, where: tuple[str, ...], message: str) -> None:
        super().__init__(f"{'.'.join(where)}: {message}" if where else message)
        self.where, self.message = where, message


@dataclass(frozen=True)
class Wave:
    """Which resources a wave takes: those its selector matches, and/or the fleet's first
    ``percent`` (cumulative, in a stable order of the resources)."""

    name: str
    selector: Mapping[str, Any] | None = None
    percent: float | None = None


@dataclass(frozen=True)
class Policy:
    waves: tuple[Wave, ...]
    min_ready_seconds: float = 0.0
    max_failures: int = 0
    pause: float = 0.0
    progress_deadline: float = 600.0
    test: bool = False  # an admitted upgrade also passes the chart's `helm test` hooks

    def names(self) -> tuple[str, ...]:
        """Every wave's name, the implicit last one (what no declared wave took) included."""
        declared = tuple(w.name for w in self.waves)
        return declared if self.covers_all else (*declared, REST)

    @property
    def covers_all(self) -> bool:
        return any(w.percent == 100 and w.selector is None for w in self.waves)


def _seconds(raw: Mapping[str, Any], field: str, default: float) -> float:
    value = raw.get(field, default)
    try:
        return parse_duration(value)
    except ValueError:
        raise RolloutError((field,), f"expected a duration such as 30s or 10m, got {value!r}") from None


def from_config(raw: Any, check_selector: Callable[[Any], str | None]) -> Policy:
    """``rollout:`` of a watches.yaml entry; ``RolloutError`` names the field that is wrong
    (``check_selector``: what is wrong with a label selector, or None)."""
    if not isinstance(raw, Mapping):
        raise RolloutError((), "expected a mapping with 'waves' and optional " + ", ".join(_FIELDS[1:]))
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise RolloutError((unknown[0],), f"unknown field; expected one of {', '.join(_FIELDS)}")
    items = raw.get("waves")
    if not isinstance(items, list) or not items:
        raise RolloutError(("waves",), "expected a non-empty list of {name, selector and/or percent}")
    waves: list[Wave] = []
    last_percent = 0.0
    for i, item in enumerate(items):
        at = f"waves[{i}]"
        if not isinstance(item, Mapping):
            raise RolloutError((at,), "expected a mapping {name, selector, percent}")
        extra = sorted(set(item) - set(_WAVE_FIELDS))
        if extra:
            raise RolloutError((at, extra[0]), f"unknown field; expected {', '.join(_WAVE_FIELDS)}")
        name = item.get("name", f"wave-{i + 1}")
        takes_the_rest = i == len(items) - 1 and item.get("percent") == 100 and item.get("selector") is None
        if not isinstance(name, str) or not name or ":" in name or (name == REST and not takes_the_rest):
            raise RolloutError(
                (at, "name"),
                f"expected a name without ':' ({REST!r} only for a last wave of percent 100 without "
                f"selector: it names what no other wave takes), got {name!r}",
            )
        if any(w.name == name for w in waves):
            raise RolloutError((at, "name"), f"{name!r} names an earlier wave too")
        selector = item.get("selector")
        if selector is not None:
            problem = check_selector(selector)
            if problem:
                raise RolloutError((at, "selector"), problem)
        percent = item.get("percent")
        if percent is not None:
            if isinstance(percent, bool) or not isinstance(percent, int | float) or not 0 < percent <= 100:
                raise RolloutError(
                    (at, "percent"), f"expected a share of the fleet above 0 and at most 100, got {percent!r}"
                )
            if percent < last_percent:
                raise RolloutError(
                    (at, "percent"),
                    f"percentages are cumulative: {percent} is below an earlier wave's {last_percent}",
                )
            last_percent = float(percent)
        if selector is None and percent is None:
            raise RolloutError((at,), "a wave needs a selector, a percent or both")
        waves.append(Wave(name, selector, float(percent) if percent is not None else None))
    failures = raw.get("maxFailures", 0)
    if isinstance(failures, bool) or not isinstance(failures, int) or failures < 0:
        raise RolloutError(
            ("maxFailures",), f"expected a whole number of resources, 0 or more, got {failures!r}"
        )
    deadline = _seconds(raw, "progressDeadline", 600.0)
    if deadline <= 0:
        raise RolloutError(("progressDeadline",), "expected a duration above zero")
    test = raw.get("test", False)
    if not isinstance(test, bool):
        raise RolloutError(("test",), f"expected true or false, got {test!r}")
    return Policy(
        test=test,
        waves=tuple(waves),
        min_ready_seconds=_seconds(raw, "minReadySeconds", 0.0),
        max_failures=failures,
        pause=_seconds(raw, "pauseBetweenWaves", 0.0),
        progress_deadline=deadline,
    )
