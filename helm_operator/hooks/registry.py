"""The registry a hook module fills with decorators, like kopf's ``@kopf.on.…``.

A module makes one ``Hooks()`` and decorates its functions; the operator finds that object when it
loads the module named by the watch's ``hooks:`` field. Every hook is an ``async def`` taking one
argument, the :class:`~helm_operator.hooks.context.Context` (the decorators are typed so, and mypy
refuses another signature); what it is about (the run name of a scheduled task, the argument of
an action) is on the context. Each kind is its own record, holding only what that kind has.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from helm_operator.hooks.context import Context

HookFn = Callable[[Context], Awaitable[None]]
F = TypeVar("F", bound=HookFn)
Converter = Callable[[dict[str, Any]], dict[str, Any]]
C = TypeVar("C", bound=Converter)
H = TypeVar("H", bound="Hook")

Stage = Literal["install", "upgrade", "uninstall"]
STAGES: tuple[Stage, ...] = ("install", "upgrade", "uninstall")
When = Literal["before", "after"]

DEFAULT_TIMEOUT = 300.0  # seconds a hook may run before it is cancelled


@dataclass(frozen=True)
class Hook:
    """What every hook has: the function and how long it may run."""

    fn: HookFn
    timeout: float = DEFAULT_TIMEOUT

    @property
    def kind(self) -> str:
        """``values``, ``validate``, ``before``, ``after``, ``schedule``, ``action`` or ``watch``."""
        raise NotImplementedError

    @property
    def where(self) -> str:
        return self.kind

    @property
    def governed(self) -> tuple[str, ...]:
        """The spec fields whose invalidity holds this hook (none but for schedules and actions)."""
        return ()

    @property
    def label(self) -> str:
        """How errors and Events name the hook: ``before_uninstall final_backup``."""
        return f"{self.where} {getattr(self.fn, '__name__', repr(self.fn))}"


@dataclass(frozen=True)
class ValueHook(Hook):
    """Changes ``ctx.values`` before the chart is rendered."""

    @property
    def kind(self) -> str:
        return "values"


@dataclass(frozen=True)
class ValidateHook(Hook):
    """Checks spec fields; an ``InvalidSpec`` holds the hooks that use the field it names."""

    @property
    def kind(self) -> str:
        return "validate"


@dataclass(frozen=True, kw_only=True)
class StageHook(Hook):
    """Runs before or after Helm installs, upgrades or uninstalls."""

    when: When
    stage: Stage
    block_for: float | None = None  # before uninstall: give up blocking the deletion after this long

    @property
    def kind(self) -> str:
        return self.when

    @property
    def where(self) -> str:
        return f"{self.when}_{self.stage}"


def _own_section(path: str) -> tuple[str, ...]:
    own = path.rpartition(".")[0]
    return (own,) if own else ()


@dataclass(frozen=True, kw_only=True)
class ScheduleHook(Hook):
    """A task run on a cron (``cron``) or an interval in seconds (``every``) read from the resource."""

    name: str  # the task's name (in status and run names)
    cron: str = ""  # dotted path of the cron expression, e.g. spec.backup.schedule
    every: str = ""  # dotted path of an interval in seconds instead of a cron
    uses: tuple[str, ...] = ()  # spec fields it depends on (held while one is invalid)

    @property
    def kind(self) -> str:
        return "schedule"

    @property
    def path(self) -> str:
        """Where the resource gives the schedule."""
        return self.cron or self.every

    @property
    def governed(self) -> tuple[str, ...]:
        """What it ``uses``, and the section its cron or interval sits in (``spec.backup.schedule``
        → ``spec.backup``)."""
        return tuple(dict.fromkeys((*self.uses, *_own_section(self.path))))


@dataclass(frozen=True, kw_only=True)
class ActionHook(Hook):
    """Runs once per request ``helm-operator.io/action: <verb>[=<argument>]``."""

    verb: str
    uses: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return "action"

    @property
    def governed(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.uses))


@dataclass(frozen=True, kw_only=True)
class WatchHook(Hook):
    """Runs when an object of the kind ``watched`` that the release made changes."""

    name: str  # the function's name: the key of its pending changes
    watched: tuple[str, str]  # (apiVersion, kind)
    when: Callable[[Mapping[str, Any]], bool] | None = None  # which changed objects call it
    beside_helm: bool = False  # runs while Helm acts on the release too (see Hooks.watch)

    @property
    def kind(self) -> str:
        return "watch"


def _fields(uses: str | Sequence[str]) -> tuple[str, ...]:
    return (uses,) if isinstance(uses, str) else tuple(uses)


def _check_stage(stage: str) -> None:
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {', '.join(STAGES)}, not {stage!r}")


class Hooks:
    """The hooks of one module. Decorators return the function unchanged, so it stays testable."""

    def __init__(self) -> None:
        self.hooks: list[Hook] = []  # every hook, in the order the module declares them
        # API versions: (from, to) -> a pure function over the whole object (``convert``)
        self.converters: dict[tuple[str, str], Converter] = {}

    def _add(self, hook: Hook) -> None:
        self.hooks.append(hook)

    def _all(self, kind: type[H]) -> list[H]:
        return [h for h in self.hooks if isinstance(h, kind)]

    # --- the hooks of each kind, typed ---------------------------------------------------------

    @property
    def translators(self) -> list[ValueHook]:
        return self._all(ValueHook)

    @property
    def validators(self) -> list[ValidateHook]:
        return self._all(ValidateHook)

    def around(self, when: When, stage: Stage) -> list[StageHook]:
        return [h for h in self._all(StageHook) if h.when == when and h.stage == stage]

    @property
    def schedules(self) -> list[ScheduleHook]:
        return self._all(ScheduleHook)

    @property
    def actions(self) -> list[ActionHook]:
        return self._all(ActionHook)

    def action_for(self, verb: str) -> ActionHook | None:
        return next((h for h in self.actions if h.verb == verb), None)

    @property
    def watchers(self) -> list[WatchHook]:
        return self._all(WatchHook)

    def of(self, kind: str, stage: Stage | None = None) -> list[Hook]:
        """The hooks of a kind by its name (``before``, ``schedule`` …), of a stage if given."""
        return [
            h
            for h in self.hooks
            if h.kind == kind and (stage is None or (isinstance(h, StageHook) and h.stage == stage))
        ]

    def summary(self) -> str:
        """What the module declares, for the start-up log: each hook by its label (a schedule
        with where its timing is read, an action by its verb), then the converters."""

        def one(h: Hook) -> str:
            if isinstance(h, ScheduleHook):
                return f"schedule {h.name} ({h.path})"
            if isinstance(h, ActionHook):
                return f"action {h.verb}"
            if isinstance(h, WatchHook):
                return f"watch {'/'.join(h.watched)} {h.name}"
            return h.label

        said = [one(h) for h in self.hooks]
        said += [f"converter {a} -> {b}" for a, b in self.converters]
        return "; ".join(said) or "no hooks"

    # --- the decorators ------------------------------------------------------------------------

    def convert(self, source: str, target: str) -> Callable[[C], C]:
        """A converter between two versions of the watch's kind (``"v1"``, ``"v2"``): a plain
        ``def`` taking the object as the API server stores it in ``source`` and returning it as
        ``target`` has it (``apiVersion`` is set for it). Pure: no I/O, same output for the same
        input; metadata other than labels and annotations is kept as it came. The operator's
        conversion webhook calls it; declare both directions, to and from the watch's version."""

        def deco(fn: C) -> C:
            if (source, target) in self.converters:
                raise ValueError(f"a converter from {source} to {target} is already declared")
            if source == target:
                raise ValueError(f"a converter needs two different versions, got {source} to {target}")
            self.converters[(source, target)] = fn
            return fn

        return deco

    def values(self, *, timeout: float = 60.0) -> Callable[[F], F]:
        """A value translator: changes ``ctx.values`` (the CR's spec merged with overrideValues)
        before the chart is rendered. Runs on every reconcile, so it must give the same values for
        the same cluster state, or every resync becomes an upgrade."""

        def deco(fn: F) -> F:
            self._add(ValueHook(fn, timeout))
            return fn

        return deco

    def validate(self, *, timeout: float = 30.0) -> Callable[[F], F]:
        """Checks the spec fields the hooks use (raise ``InvalidSpec`` naming the field); a
        failure is shown on the resource (``Day2``) and holds the schedules and actions that
        use that field — not the release, the watch hooks or anything else."""

        def deco(fn: F) -> F:
            self._add(ValidateHook(fn, timeout))
            return fn

        return deco

    def before(
        self, stage: Stage, *, timeout: float = DEFAULT_TIMEOUT, block_for: float | None = None
    ) -> Callable[[F], F]:
        """Runs before Helm installs, upgrades or uninstalls; a failure stops that action.

        ``block_for`` (seconds, uninstall only): how long a failing hook may hold the deletion
        before the uninstall goes ahead anyway (None: until it succeeds or is overridden)."""
        _check_stage(stage)

        def deco(fn: F) -> F:
            self._add(StageHook(fn, timeout, when="before", stage=stage, block_for=block_for))
            return fn

        return deco

    def after(self, stage: Stage, *, timeout: float = DEFAULT_TIMEOUT) -> Callable[[F], F]:
        """Runs after Helm installed, upgraded or uninstalled successfully."""
        _check_stage(stage)

        def deco(fn: F) -> F:
            self._add(StageHook(fn, timeout, when="after", stage=stage))
            return fn

        return deco

    def schedule(
        self,
        name: str,
        *,
        cron: str = "",
        every: str = "",
        timeout: float = 3600.0,
        uses: str | Sequence[str] = (),
    ) -> Callable[[F], F]:
        """A task run on the standard 5-field cron found at ``cron`` (a dotted path in the
        resource, e.g. ``spec.backup.schedule``), or every N seconds read from ``every`` (e.g.
        ``spec.backup.backupIntervalInSecond``); nothing there, no runs. It is held (no new runs)
        while a field it governs is invalid: the section its cron sits in, and ``uses``."""
        if bool(cron) == bool(every):
            raise ValueError(f"schedule {name!r}: give exactly one of cron= or every=")

        def deco(fn: F) -> F:
            self._add(ScheduleHook(fn, timeout, name=name, cron=cron, every=every, uses=_fields(uses)))
            return fn

        return deco

    def watch(
        self,
        api_version: str,
        kind: str,
        *,
        when: Callable[[Mapping[str, Any]], bool] | None = None,
        timeout: float = 60.0,
        beside_helm: bool = False,
    ) -> Callable[[F], F]:
        """Runs when an object of this kind that the release made changes (its Pods too: the
        owner label is put on pod templates), including status changes such as readiness.

        ``ctx.objects`` holds every such object of the resource (from the watch's cache) and
        ``ctx.changed`` the one that changed; ``when`` picks the changes that matter. Changes
        that arrive while the hook runs call it once more afterwards; raising ``TemporaryError``
        calls it again after the delay (e.g. to act when a grace period is over).

        Like every hook it runs under the release's lock, never while Helm acts on the release;
        ``beside_helm=True`` lets it run then too, beside the Helm action and its stage hooks
        (still never beside a schedule, action or other watch hook of the resource): for a hook
        the release's readiness depends on, which Helm waits for (a primary elected by a label
        the other instances wait for), or one that must keep the release available during a
        long upgrade (failover). It must not change what the chart renders."""

        def deco(fn: F) -> F:
            name = getattr(fn, "__name__", repr(fn))
            self._add(
                WatchHook(
                    fn, timeout, name=name, watched=(api_version, kind), when=when, beside_helm=beside_helm
                )
            )
            return fn

        return deco

    def action(
        self, verb: str, *, timeout: float = 3600.0, uses: str | Sequence[str] = ()
    ) -> Callable[[F], F]:
        """Runs once per request ``helm-operator.io/action: <verb>[=<argument>]`` on the resource.
        ``uses``: spec fields (dotted, e.g. ``spec.backup``) it depends on; while a ``validate``
        hook finds one invalid, a request waits (and ``Day2`` says why) instead of running."""

        def deco(fn: F) -> F:
            self._add(ActionHook(fn, timeout, verb=verb, uses=_fields(uses)))
            return fn

        return deco
