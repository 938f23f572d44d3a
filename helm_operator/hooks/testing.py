"""A test harness for hook authors: run a hook against a resource, values and objects, without a
cluster, and assert what it asked for.

    async def test_final_backup_is_skipped_on_request():
        h = Harness(hooks, resource)
        out = await h.before("uninstall")
        assert out.ok and out.created == []

The fake client keeps objects in memory and records every operation as ``(verb, kind, name)``;
it refuses a name the API server would refuse (an empty one too). ``on_create`` lets a test decide
what happens to what the hook creates (e.g. a Job that completes). A scheduled run or an action
gets the run name (``ctx.run``) and slot the operator would give it unless ``run_as`` says
otherwise. :func:`process` shows what a container of a Job would exec, as the kubelet starts it;
:func:`load` loads a hook module from its file, as the operator does.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from helm_operator.core.vocabulary import Event
from helm_operator.hooks._runner import HookResult, run
from helm_operator.hooks.builtin import jobs
from helm_operator.hooks.context import Context, Day2Status, ExecFailed, Release, frozen, lookup, thawed
from helm_operator.hooks.errors import InvalidSpec
from helm_operator.hooks.loader import load
from helm_operator.hooks.registry import (
    ActionHook,
    H,
    Hook,
    Hooks,
    ScheduleHook,
    Stage,
    ValueHook,
    WatchHook,
)
from helm_operator.hooks.schedule import bounded, check_cron, check_interval, run_name, slot_at_or_before

__all__ = [
    "FakeKube",
    "Harness",
    "Invalid",
    "NotFound",
    "Outcome",
    "Process",
    "check_name",
    "complete_jobs",
    "expand",
    "fail_jobs",
    "load",
    "process",
]

Key = tuple[str, str, str | None, str]  # apiVersion, kind, namespace, name


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(obj["apiVersion"]), str(obj["kind"]), meta.get("namespace"), str(meta["name"]))


def complete_jobs(obj: dict[str, Any]) -> None:
    """An ``on_create`` that makes every Job succeed at once (as KWOK does on the test cluster)."""
    if obj.get("kind") == "Job":
        obj["status"] = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}


def fail_jobs(obj: dict[str, Any]) -> None:
    if obj.get("kind") == "Job":
        obj["status"] = {
            "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]
        }


class NotFound(LookupError):
    """What the fake raises for a missing object (``status`` 404, as the API's errors carry)."""

    status = 404


class Invalid(ValueError):
    """What the fake raises for an object the API server would refuse (``status`` 422)."""

    status = 422


_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_LABELLED_NAME = {"Job": 63}  # its name becomes the value of its Pods' job-name label


def check_name(obj: Mapping[str, Any]) -> None:
    """Refuse a name the API server refuses: empty, not a DNS-1123 subdomain, too long."""
    kind, name = str(obj.get("kind")), str((obj.get("metadata") or {}).get("name") or "")
    limit = MAX_LABELLED_NAME.get(kind, 253)
    if not _SUBDOMAIN.fullmatch(name) or len(name) > limit:
        raise Invalid(
            f"{kind} {name!r} is invalid: metadata.name must be a DNS-1123 subdomain "
            f"(a-z, 0-9, '-', '.') of 1 to {limit} characters"
        )


class FakeKube:
    """In-memory :class:`~helm_operator.hooks.context.KubeClient` that records operations."""

    def __init__(
        self,
        objects: Iterable[Mapping[str, Any]] = (),
        on_create: Callable[[dict[str, Any]], None] | None = None,
        on_exec: Callable[[str, tuple[str, ...]], str] | None = None,
    ) -> None:
        self.objects: dict[Key, dict[str, Any]] = {_key(o): thawed(o) for o in objects}
        self.operations: list[tuple[str, str, str]] = []
        self.commands: list[tuple[str, str | None, tuple[str, ...]]] = []  # (pod, container, argv)
        self.on_create = on_create
        self.on_exec = on_exec

    async def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        self.operations.append(("get", kind, name))
        found = self.objects.get((api_version, kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        self.operations.append(("list", kind, ""))
        out = []
        for (av, k, ns, _), obj in self.objects.items():
            have = (obj.get("metadata") or {}).get("labels") or {}
            matches = all(have.get(lk) == lv for lk, lv in (labels or {}).items())
            if (av, k) == (api_version, kind) and (namespace is None or ns == namespace) and matches:
                out.append(copy.deepcopy(obj))
        return out

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        key = _key(obj)
        self.operations.append(("create", key[1], key[3]))
        check_name(obj)
        if obj.get("kind") in jobs.RUNS_CONTAINERS:  # as the operator's client: no script made of values
            jobs.check(obj)
        if key not in self.objects:
            stored = thawed(obj)
            if self.on_create is not None:
                self.on_create(stored)
            self.objects[key] = stored
        return copy.deepcopy(self.objects[key])

    async def patch(
        self, api_version: str, kind: str, name: str, namespace: str | None, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        self.operations.append(("patch", kind, name))
        key = (api_version, kind, namespace, name)
        if key not in self.objects:
            raise NotFound(f"{kind} {name} not found")
        self.objects[key] = _merge(self.objects[key], thawed(patch))
        return copy.deepcopy(self.objects[key])

    async def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        self.operations.append(("delete", kind, name))
        return self.objects.pop((api_version, kind, namespace, name), None) is not None

    async def exec(
        self,
        pod: str,
        namespace: str,
        argv: Sequence[str],
        container: str | None = None,
        timeout: float = 10.0,
    ) -> str:
        """Records the command (``self.commands``); ``on_exec`` answers it or raises
        :class:`~helm_operator.hooks.context.ExecFailed`; without it, an empty output."""
        self.operations.append(("exec", "Pod", pod))
        self.commands.append((pod, container, tuple(argv)))
        if (namespace, pod) not in {(k[2], k[3]) for k in self.objects if k[1] == "Pod"}:
            raise ExecFailed(f"exec in {namespace}/{pod}: 404 Not Found", None)
        return self.on_exec(pod, tuple(argv)) if self.on_exec is not None else ""


def _merge(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386)."""
    out = dict(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


class _Saved:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    async def save(self, day2: Mapping[str, Any]) -> None:
        self.patches.append(dict(day2))


class _Events:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str]] = []  # (type, reason, message): typed Events

    async def post(self, event: Event) -> None:
        self.posted.append(event)


@dataclass
class Outcome:
    """What one hook run did."""

    result: HookResult
    values: dict[str, Any]
    day2: dict[str, Any]
    events: list[tuple[str, str, str]]
    operations: list[tuple[str, str, str]]
    saved: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def created(self) -> list[tuple[str, str]]:
        return [(k, n) for verb, k, n in self.operations if verb == "create"]

    @property
    def deleted(self) -> list[tuple[str, str]]:
        return [(k, n) for verb, k, n in self.operations if verb == "delete"]


class Harness:
    """Runs the hooks of one module against a resource; keeps ``status.day2`` between runs.

    One method per hook kind: ``values()``, ``validate()``, ``before(stage)``, ``after(stage)``,
    ``schedule(name)``, ``action(verb, argument)``, ``watch(name, changed=…)``; ``run(kind, …)``
    is the same by the kind's name."""

    def __init__(
        self,
        hooks: Hooks,
        resource: Mapping[str, Any],
        *,
        values: Mapping[str, Any] | None = None,
        objects: Iterable[Mapping[str, Any]] = (),
        release: Release | None = None,
        on_create: Callable[[dict[str, Any]], None] | None = complete_jobs,
    ) -> None:
        self.hooks = hooks
        self.resource = thawed(resource)
        self.chart_values = dict(values if values is not None else self.resource.get("spec") or {})
        self.release = release
        self.kube = FakeKube(objects, on_create)

    @staticmethod
    def _one(found: Sequence[H], what: str) -> H:
        if len(found) != 1:
            raise LookupError(f"{len(found)} hooks {what}")
        return found[0]

    def find(self, kind: str, stage: Stage | None = None, name: str = "") -> Hook:
        """The one hook of a kind (and stage; ``name``: a task's name, a verb or a function's)."""
        found = [h for h in self.hooks.of(kind, stage) if not name or name in _names(h)]
        return self._one(found, f"of kind {kind!r} stage {stage!r} name {name!r}")

    def _slot(self, hook: ScheduleHook, now: dt.datetime) -> dt.datetime:
        """The slot the operator would run a scheduled task for at ``now`` (the latest one of
        the resource's schedule; ``now`` itself if the resource gives none)."""
        raw = lookup(self.resource, hook.path)
        try:
            expr = check_cron(raw, hook.path) if hook.cron else check_interval(raw, hook.path)
        except InvalidSpec:
            return now.replace(microsecond=0) if hook.every else now.replace(second=0, microsecond=0)
        return slot_at_or_before(expr, now)

    # --- one method per hook kind ----------------------------------------------------------------

    async def values(self, name: str = "") -> Outcome:
        """Run the value translator (``name``: its function, if there are several); on success
        the next runs see the values it gave."""
        hook = self._one([h for h in self.hooks.translators if not name or name in _names(h)], "values")
        return await self._run(hook)

    async def validate(self, name: str = "") -> Outcome:
        """Run the ``validate`` hook (``name``: its function, if there are several)."""
        hook = self._one([h for h in self.hooks.validators if not name or name in _names(h)], "validate")
        return await self._run(hook)

    async def before(self, stage: Stage, name: str = "") -> Outcome:
        found = [h for h in self.hooks.around("before", stage) if not name or name in _names(h)]
        return await self._run(self._one(found, f"before {stage}"))

    async def after(self, stage: Stage, name: str = "") -> Outcome:
        found = [h for h in self.hooks.around("after", stage) if not name or name in _names(h)]
        return await self._run(self._one(found, f"after {stage}"))

    async def schedule(
        self,
        name: str,
        *,
        now: dt.datetime | None = None,
        run_as: str = "",
        scheduled: dt.datetime | None = None,
    ) -> Outcome:
        """A run of the task ``name`` with the run name and slot the operator would give it
        (``<resource>-<task>-<slot>``, the latest slot at ``now``) unless given."""
        hook = self._one([h for h in self.hooks.schedules if h.name == name], f"schedule {name!r}")
        now = now or dt.datetime.now(dt.UTC)
        scheduled = scheduled or self._slot(hook, now)
        run_as = run_as or run_name(self._name, hook.name, scheduled, seconds=bool(hook.every))
        return await self._run(hook, run_as=run_as, scheduled=scheduled)

    async def action(
        self, verb: str, argument: str = "", *, now: dt.datetime | None = None, run_as: str = ""
    ) -> Outcome:
        """The action ``verb[=argument]``, run as ``<resource>-<verb>-<now>`` unless ``run_as``."""
        hook = self._one([h for h in self.hooks.actions if h.verb == verb], f"action {verb!r}")
        now = now or dt.datetime.now(dt.UTC)
        run_as = run_as or bounded(f"{self._name}-{verb}", now.strftime("%Y%m%d%H%M%S"))
        return await self._run(hook, run_as=run_as, argument=argument)

    async def watch(
        self,
        name: str = "",
        *,
        changed: Mapping[str, Any] | None = None,
        objects: Iterable[Mapping[str, Any]] = (),
    ) -> Outcome:
        """The watch hook (``name``: its function, if there are several), seeing the fake's
        objects of the kind it watches (``objects`` are added first) and ``changed``."""
        for obj in objects:
            self.kube.objects[_key(obj)] = thawed(obj)
        hook = self._one([h for h in self.hooks.watchers if not name or h.name == name], f"watch {name!r}")
        return await self._run(hook, changed=changed)

    async def run(
        self,
        kind: str,
        *,
        stage: Stage | None = None,
        name: str = "",
        run_as: str = "",
        argument: str = "",
        scheduled: dt.datetime | None = None,
        changed: Mapping[str, Any] | None = None,
        now: dt.datetime | None = None,
    ) -> Outcome:
        """Run one hook of a kind given by name (``name``: a task's name, a verb or a function's);
        the same as the method of that kind."""
        hook = self.find(kind, stage, name)
        if isinstance(hook, ScheduleHook):
            return await self.schedule(hook.name, now=now, run_as=run_as, scheduled=scheduled)
        if isinstance(hook, ActionHook):
            return await self.action(hook.verb, argument, now=now, run_as=run_as)
        return await self._run(hook, run_as=run_as, argument=argument, scheduled=scheduled, changed=changed)

    @property
    def _name(self) -> str:
        return str(self.resource["metadata"]["name"])

    async def _run(
        self,
        hook: Hook,
        *,
        run_as: str = "",
        argument: str = "",
        scheduled: dt.datetime | None = None,
        changed: Mapping[str, Any] | None = None,
    ) -> Outcome:
        watched = (
            [o for o in self.kube.objects.values() if hook.watched == (o.get("apiVersion"), o.get("kind"))]
            if isinstance(hook, WatchHook)
            else []
        )
        saved, events = _Saved(), _Events()
        status = self.resource.setdefault("status", {})
        ctx = Context(
            resource=frozen(self.resource),
            values=copy.deepcopy(self.chart_values),
            release=self.release,
            kube=self.kube,
            day2=Day2Status(status.get("day2") or {}, saved),
            events=events,
            log=logging.LoggerAdapter(logging.getLogger("helm_operator.hooks.test"), {}),
            run=run_as,
            scheduled_time=scheduled,
            argument=argument,
            objects=tuple(frozen(o) for o in watched),
            changed=frozen(changed) if changed is not None else None,
        )
        before = len(self.kube.operations)
        result = await run(hook, ctx)
        status["day2"] = thawed(dict(ctx.day2))
        if isinstance(hook, ValueHook) and result.ok:
            self.chart_values = ctx.values
        return Outcome(
            result, ctx.values, status["day2"], events.posted, self.kube.operations[before:], saved.patches
        )


def _names(hook: Hook) -> tuple[str, ...]:
    """What a test may call a hook by: its function's name, and a task's name or an action's verb."""
    own: tuple[str, ...] = (hook.name,) if isinstance(hook, ScheduleHook | WatchHook) else ()
    if isinstance(hook, ActionHook):
        own = (hook.verb,)
    return (getattr(hook.fn, "__name__", ""), *own)


@dataclass(frozen=True)
class Process:
    """What a container execs: its argv and environment, as the kubelet starts it."""

    argv: list[str]
    env: dict[str, str]


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's expansion of command, args and env values: ``$(NAME)`` becomes the variable's
    value if it is defined (else stays), ``$$`` becomes ``$``."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            end = text.find(")", i + 2) if nxt == "(" else -1
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if end >= 0:
                name = text[i + 2 : end]
                out.append(env.get(name, f"$({name})"))
                i = end + 1
                continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def process(container: Mapping[str, Any]) -> Process:
    """The argv and environment a container of a Job would run with: its ``command`` and ``args``
    and plain ``env`` values after the kubelet's ``$(NAME)`` expansion (variables from
    ``valueFrom`` are left out). A container without ``command`` runs its image's entrypoint,
    which a test cannot know: that is an error here."""
    if not container.get("command"):
        raise ValueError(
            f"container {container.get('name')!r} has no command: it runs its image's entrypoint"
        )
    env: dict[str, str] = {}
    for var in container.get("env") or ():
        if "value" in var:
            env[str(var["name"])] = expand(str(var["value"]), env)
    argv = [*container["command"], *(container.get("args") or ())]
    return Process([expand(str(a), env) for a in argv], env)


def converted(hooks: Hooks, obj: Mapping[str, Any], version: str, hub: str) -> dict[str, Any]:
    """``obj`` in ``version``, converted as the operator's webhook would (``hub``: the watch's
    version); ``ConversionError`` with the message the client would see."""
    from helm_operator.hooks.conversion import Kind, convert

    group, _, _ = str(obj.get("apiVersion", "")).rpartition("/")
    return convert(Kind(group, str(obj.get("kind")), hub, hooks.converters), obj, version)


def round_trip(hooks: Hooks, obj: Mapping[str, Any], through: str, hub: str) -> dict[str, Any]:
    """``obj`` converted to ``through`` and back; a test asserts it equals ``obj`` (nothing lost)."""
    back_to = str(obj.get("apiVersion", "")).rpartition("/")[2]
    return converted(hooks, converted(hooks, obj, through, hub), back_to, hub)
