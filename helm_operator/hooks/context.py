"""What a hook is given: the resource (read-only), the values, the deployed release, a Kubernetes
client usable from async code, the ``status.day2`` writer, Events and a logger.

The context talks to the cluster only through the small protocols below, so the same hook runs
against the real API server in the operator and against recorded fakes in the test harness.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from helm_operator.core.conditions import OWNS_DAY2
from helm_operator.core.naming import OWNER_LABEL, owner_id, release_name
from helm_operator.core.vocabulary import Event, EventType

DRIFT_PAUSED = "driftPaused"  # status.day2 key: why drift correction is paused (absent: it is not)


class ReadOnlyDict(dict[str, Any]):
    """A plain ``dict`` (``isinstance(x, dict)`` holds, JSON and YAML dump it) that refuses to be
    changed: what a hook reads of the resource is not a place to write. A copy (``dict(x)``,
    ``copy.deepcopy(x)``, ``thawed(x)``) is an ordinary, mutable dict."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("read-only: this is the resource as read; change a copy (dict(x), copy.deepcopy(x))")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        result: dict[str, Any] = thawed(self)
        return result

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (thawed(self),))


def frozen(value: Any) -> Any:
    """A read-only deep view: mappings become :class:`ReadOnlyDict`, lists tuples."""
    if isinstance(value, Mapping):
        return ReadOnlyDict({k: frozen(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(frozen(v) for v in value)
    return value


def thawed(value: Any) -> Any:
    """A plain, mutable deep copy of a (possibly frozen) value."""
    if isinstance(value, Mapping):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thawed(v) for v in value]
    return value


def lookup(resource: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path (``spec.backup.schedule``), or None."""
    node: Any = resource
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


class KubeClient(Protocol):
    """The Kubernetes operations hooks use; every call is awaitable (no blocking the loop)."""

    async def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None: ...

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]: ...

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create; an object of that name that already exists is returned as it is."""
        ...

    async def patch(
        self, api_version: str, kind: str, name: str, namespace: str | None, patch: Mapping[str, Any]
    ) -> dict[str, Any]: ...

    async def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete (with its dependents); False if it was already gone."""
        ...

    async def exec(
        self,
        pod: str,
        namespace: str,
        argv: Sequence[str],
        container: str | None = None,
        timeout: float = 10.0,
    ) -> str:
        """Run ``argv`` (no shell unless it names one) in a running container of the Pod; its
        output. :class:`ExecFailed` when it cannot run or exits non-zero."""
        ...


class ExecFailed(Exception):
    """A command run in a container did not run, or exited non-zero (``code``; None: not run)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class StatusSink(Protocol):
    async def save(self, day2: Mapping[str, Any]) -> None:
        """Merge these ``status.day2`` keys into the resource's status."""
        ...


class EventSink(Protocol):
    async def post(self, event: Event) -> None: ...


def _own(key: str) -> None:
    """A hook module records its own keys; the engines' and the health's are theirs."""
    owner = next((o for o, keys in OWNS_DAY2.items() if key in keys), None)
    if owner is not None:
        raise ValueError(
            f"status.day2.{key} is written by the operator ({owner}), not by a hook: use another key"
        )


class Day2Status(MutableMapping[str, Any]):
    """``status.day2`` of the resource: read it like a dict, change keys, ``await save()``.

    Only the keys changed since the last save are written (a merge patch), and the runner saves
    whatever is left when the hook returns or fails, so a record of a failed backup is not lost.
    """

    def __init__(self, current: Mapping[str, Any], sink: StatusSink) -> None:
        self._data: dict[str, Any] = thawed(current)
        self._dirty: set[str] = set()
        self._sink = sink

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        _own(key)
        self._data[key] = value
        self._dirty.add(key)

    def __delitem__(self, key: str) -> None:
        del self._data[key]
        self._dirty.add(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def touch(self, key: str) -> None:
        """Mark a key changed in place (``ctx.day2["backups"].append(...)``)."""
        self._dirty.add(key)

    @property
    def changed(self) -> dict[str, Any]:
        return {k: self._data.get(k) for k in sorted(self._dirty)}

    async def save(self) -> None:
        if not self._dirty:
            return
        patch = self.changed
        await self._sink.save(patch)
        self._dirty.clear()


@dataclass(frozen=True)
class Release:
    """The deployed Helm release: its name, revision, status and the objects it rendered."""

    name: str
    namespace: str
    revision: int
    status: str
    objects: Sequence[Mapping[str, Any]] = ()

    def find(self, kind: str, name: str | None = None) -> list[Mapping[str, Any]]:
        return [
            o
            for o in self.objects
            if o.get("kind") == kind and (name is None or (o.get("metadata") or {}).get("name") == name)
        ]


@dataclass
class Context:
    """Given to every hook. ``resource`` is read-only; ``values`` may be changed by value
    translators and ``before`` hooks of install/upgrade (what Helm then renders)."""

    resource: Mapping[str, Any]
    values: dict[str, Any]
    release: Release | None
    kube: KubeClient
    day2: Day2Status
    events: EventSink
    log: logging.LoggerAdapter[logging.Logger]
    run: str = ""  # a scheduled task's or action's run name: deterministic, so reruns can adopt it
    scheduled_time: dt.datetime | None = None  # the cron slot a scheduled run is for (UTC)
    argument: str = ""  # an action's argument (``switchover=<pod>``: the pod)
    objects: Sequence[Mapping[str, Any]] = ()  # a watch hook: the watched objects of this resource
    changed: Mapping[str, Any] | None = None  # a watch hook: the object that changed (None: a resync)
    deadline: float | None = None  # loop time when the hook will be cancelled
    extra: dict[str, Any] = field(default_factory=dict)
    # A stage hook's way to keep the resource's other hooks out (see ``alone``); None where the
    # hook already runs alone (schedules, actions, watch hooks).
    exclusive: Callable[[], AbstractAsyncContextManager[None]] | None = None

    @contextlib.asynccontextmanager
    async def alone(self) -> AsyncIterator[None]:
        """No other hook of the resource runs meanwhile, not even a watch hook that runs beside
        Helm: for a stage hook that changes what such a hook decides on (a roll moving the
        primary while the failover hook watches the Pods). Schedules, actions and watch hooks
        already run alone; for them this changes nothing."""
        if self.exclusive is None:
            yield
            return
        async with self.exclusive():
            yield

    @property
    def name(self) -> str:
        return str(self.resource["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        ns = self.resource["metadata"].get("namespace")
        return str(ns) if ns else None

    @property
    def uid(self) -> str:
        return str(self.resource["metadata"].get("uid") or "")

    @property
    def owner(self) -> str:
        """The resource's owner id (the value of the owner label on everything its release made)."""
        group = str(self.resource["apiVersion"]).rpartition("/")[0]
        return owner_id(group, str(self.resource["kind"]), self.namespace or "", self.name)

    @property
    def owner_selector(self) -> dict[str, str]:
        """Labels selecting what the release made (its Pods too): ``ctx.kube.list(..., labels=...)``."""
        return {OWNER_LABEL: self.owner}

    @property
    def release_name(self) -> str:
        """The Helm release's name (``.Release.Name`` in the chart)."""
        return release_name(self.name)

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.resource.get("spec") or ReadOnlyDict()

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.resource["metadata"].get("annotations") or ReadOnlyDict()

    @property
    def owner_reference(self) -> dict[str, Any]:
        """An ownerReference to the resource, for objects a hook creates that should go with it."""
        return {
            "apiVersion": self.resource["apiVersion"],
            "kind": self.resource["kind"],
            "name": self.name,
            "uid": self.uid,
        }

    async def event(self, reason: str, message: str, *, warning: bool = False) -> None:
        """Post an Event on the resource."""
        await self.events.post(Event(EventType.WARNING if warning else EventType.NORMAL, reason, message))

    def pause_drift(self, why: str) -> None:
        """Stop drift correction of this release (saved with ``status.day2``) until resumed."""
        self.day2[DRIFT_PAUSED] = why

    def resume_drift(self) -> None:
        if self.day2.get(DRIFT_PAUSED) is not None:
            self.day2[DRIFT_PAUSED] = None
