"""The registry a hook module fills with decorators, like kopf's ``@kopf.on.…``.

A module makes one ``Hooks()`` and decorates its functions; the operator finds that object when it
loads the module named by the watch's ``hooks:`` field. Every hook is an ``async def`` taking one
argument, the :class:`~helm_operator.hooks.context.Context`; what it is about (the run name of a
scheduled task, the argument of an action) is on the context.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

HookFn = Callable[[Any], Awaitable[None]]
F = TypeVar("F", bound=Callable[..., Any])

Stage = Literal["install", "upgrade", "uninstall"]
STAGES: tuple[Stage, ...] = ("install", "upgrade", "uninstall")

DEFAULT_TIMEOUT = 300.0  # seconds a hook may run before it is cancelled


@dataclass(frozen=True)
class Hook:
    """One registered hook: what it reacts to, the function, and its limits."""

    kind: str  # "values", "validate", "before", "after", "schedule", "action", "watch"
    fn: Callable[..., Any]
    timeout: float = DEFAULT_TIMEOUT
    stage: Stage | None = None  # before/after
    name: str = ""  # schedule: the task's name (in status and run names); action: the verb
    cron: str = ""  # schedule: dotted path of the cron expression in the resource, e.g. spec.backup.schedule
    every: str = ""  # schedule: dotted path of an interval in seconds instead of a cron
    watched: tuple[str, str] | None = None  # watch: (apiVersion, kind) of the release's objects
    when: Callable[[Any], bool] | None = None  # watch: which changed objects call the hook
    block_for: float | None = None  # before uninstall: give up blocking the deletion after this long
    uses: tuple[str, ...] = ()  # schedule/action: spec fields it depends on (held while one is invalid)

    @property
    def governed(self) -> tuple[str, ...]:
        """The spec fields whose invalidity holds this hook: what it declares it uses, and for a
        schedule the section its cron or interval sits in (``spec.backup.schedule`` → ``spec.backup``)."""
        own = (self.cron or self.every).rpartition(".")[0]
        return tuple(dict.fromkeys((*self.uses, *([own] if own else []))))

    @property
    def label(self) -> str:
        """How errors and Events name the hook: ``before_uninstall final_backup``."""
        where = f"{self.kind}_{self.stage}" if self.stage else self.kind
        return f"{where} {getattr(self.fn, '__name__', repr(self.fn))}"


class Hooks:
    """The hooks of one module. Decorators return the function unchanged, so it stays testable."""

    def __init__(self) -> None:
        self.hooks: list[Hook] = []

    def _add(self, hook: Hook) -> None:
        self.hooks.append(hook)

    def of(self, kind: str, stage: Stage | None = None) -> list[Hook]:
        return [h for h in self.hooks if h.kind == kind and (stage is None or h.stage == stage)]

    def values(self, *, timeout: float = 60.0) -> Callable[[F], F]:
        """A value translator: changes ``ctx.values`` (the CR's spec merged with overrideValues)
        before the chart is rendered. Runs on every reconcile, so it must give the same values for
        the same cluster state, or every resync becomes an upgrade."""

        def deco(fn: F) -> F:
            self._add(Hook("values", fn, timeout))
            return fn

        return deco

    def validate(self, *, timeout: float = 30.0) -> Callable[[F], F]:
        """Checks the spec fields the hooks use (raise ``InvalidSpec`` naming the field); a
        failure is shown on the resource (``Day2``) and holds the schedules and actions that
        use that field — not the release, the watch hooks or anything else."""

        def deco(fn: F) -> F:
            self._add(Hook("validate", fn, timeout))
            return fn

        return deco

    def before(
        self, stage: Stage, *, timeout: float = DEFAULT_TIMEOUT, block_for: float | None = None
    ) -> Callable[[F], F]:
        """Runs before Helm installs, upgrades or uninstalls; a failure stops that action.

        ``block_for`` (seconds, uninstall only): how long a failing hook may hold the deletion
        before the uninstall goes ahead anyway (None: until it succeeds or is overridden)."""
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {', '.join(STAGES)}, not {stage!r}")

        def deco(fn: F) -> F:
            self._add(Hook("before", fn, timeout, stage=stage, block_for=block_for))
            return fn

        return deco

    def after(self, stage: Stage, *, timeout: float = DEFAULT_TIMEOUT) -> Callable[[F], F]:
        """Runs after Helm installed, upgraded or uninstalled successfully."""
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {', '.join(STAGES)}, not {stage!r}")

        def deco(fn: F) -> F:
            self._add(Hook("after", fn, timeout, stage=stage))
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
        fields = (uses,) if isinstance(uses, str) else tuple(uses)

        def deco(fn: F) -> F:
            self._add(Hook("schedule", fn, timeout, name=name, cron=cron, every=every, uses=fields))
            return fn

        return deco

    def watch(
        self,
        api_version: str,
        kind: str,
        *,
        when: Callable[[Any], bool] | None = None,
        timeout: float = 60.0,
    ) -> Callable[[F], F]:
        """Runs when an object of this kind that the release made changes (its Pods too: the
        owner label is put on pod templates), including status changes such as readiness.

        ``ctx.objects`` holds every such object of the resource (from the watch's cache) and
        ``ctx.changed`` the one that changed; ``when`` picks the changes that matter. Changes
        that arrive while the hook runs call it once more afterwards; raising ``TemporaryError``
        calls it again after the delay (e.g. to act when a grace period is over)."""

        def deco(fn: F) -> F:
            self._add(Hook("watch", fn, timeout, name=fn.__name__, watched=(api_version, kind), when=when))
            return fn

        return deco

    def action(
        self, verb: str, *, timeout: float = 3600.0, uses: str | Sequence[str] = ()
    ) -> Callable[[F], F]:
        """Runs once per request ``helm-operator.io/action: <verb>[=<argument>]`` on the resource.
        ``uses``: spec fields (dotted, e.g. ``spec.backup``) it depends on; while a ``validate``
        hook finds one invalid, a request waits (and ``Day2`` says why) instead of running."""
        fields = (uses,) if isinstance(uses, str) else tuple(uses)

        def deco(fn: F) -> F:
            self._add(Hook("action", fn, timeout, name=verb, uses=fields))
            return fn

        return deco

    @property
    def schedules(self) -> Sequence[Hook]:
        return self.of("schedule")
