"""Leader election on a ``coordination.k8s.io`` Lease: of several replicas exactly one acts.

The election itself is the kubernetes client's (``kubernetes.leaderelection``); this module wires it
to the operator's own client configuration and gives it the two behaviours an operator needs:

* nothing that acts starts before the lease is held — the caller blocks in :meth:`wait_until_leading`
  and only then starts kopf, the drift scheduler, the sweep and the day-2 schedules;
* a leader that cannot renew stops at once (the process exits, its Deployment restarts it as a
  standby), while a leader shutting down on purpose hands the lease over so a standby takes over
  in one retry period instead of a whole lease duration;
* each renewal that succeeded is reported with the time its attempt began (``on_renewed``): what
  the fence (``fence.py``) measures the renew deadline from at every gate. The library's own
  check of the deadline runs only in this thread, between attempts: after a pause it comes last.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from helm_operator.runtime.fence import exit_now
from helm_operator.runtime.watchdog import lease_clock

log = logging.getLogger(__name__)

SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def default_namespace() -> str:
    """Where the Lease lives: $POD_NAMESPACE, else the service account's namespace, else default."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    if SA_NAMESPACE.is_file():
        return SA_NAMESPACE.read_text().strip()
    return "default"


def _identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class LeaderSettings:
    namespace: str
    name: str = "helm-operator"
    lease_duration: int = 15  # seconds a standby waits after the last renewal it saw
    renew_deadline: int = 10  # seconds a leader keeps trying to renew before it gives up
    retry_period: int = 2
    identity: str = field(default_factory=_identity)
    # Labels the Lease carries (a ControllerRing's shard Lease names its ring: the sharder finds it so).
    labels: Mapping[str, str] = field(default_factory=dict)

    def problems(self) -> list[str]:
        """What the client library would reject (it calls sys.exit); said as flag errors instead."""
        out = []
        if min(self.lease_duration, self.renew_deadline, self.retry_period) < 1:
            out.append("lease duration, renew deadline and retry period must be at least 1s")
        if self.lease_duration <= self.renew_deadline:
            out.append("--leader-election-lease-duration must be longer than the renew deadline")
        if self.renew_deadline <= 1.2 * self.retry_period:
            out.append("--leader-election-renew-deadline must exceed 1.2 x the retry period")
        return out


class _LeaseApi(client.CoordinationV1Api):
    """Lease calls that give up within the renew deadline and say why they failed.

    The library checks its renew deadline only between attempts: a request hanging on a silent
    connection would let a leader keep acting long after a standby took over. And it logs every
    failure at INFO, so a standby that can never get the lease (RBAC, wrong namespace) must warn.
    """

    def __init__(self, api: client.ApiClient, timeout: float) -> None:
        super().__init__(api)
        self.timeout = timeout
        self._last_warning = 0.0

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **{**kwargs, "_request_timeout": self.timeout})
        except ApiException as exc:
            self._warn(exc.status, exc.reason)
            raise
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            # The library retries a failed attempt only when it is an ApiException: a request that
            # timed out or lost its connection would end the election thread, and a standby would
            # never compete again (a leader would stop renewing without saying so).
            self._warn(0, f"{type(exc).__name__}: {exc}")
            raise ApiException(status=0, reason=f"{type(exc).__name__}: {exc}") from exc

    def _warn(self, status: int | None, reason: str | None) -> None:
        if status not in (404, 409) and time.monotonic() - self._last_warning > 30:
            self._last_warning = time.monotonic()
            log.warning("leader election: Lease request failed: %s %s", status, reason)

    def read_namespaced_lease(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(super().read_namespaced_lease, *args, **kwargs)

    def create_namespaced_lease(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(super().create_namespaced_lease, *args, **kwargs)

    def replace_namespaced_lease(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(super().replace_namespaced_lease, *args, **kwargs)


class _Lock(LeaseLock):
    """The library's Lease lock on our API client; once released it never writes again."""

    def __init__(self, api: client.ApiClient, settings: LeaderSettings) -> None:
        super().__init__(settings.name, settings.namespace, settings.identity)
        self.labels = dict(settings.labels)
        self.api_instance = _LeaseApi(api, timeout=max(1.0, settings.renew_deadline / 2))
        self.released = threading.Event()

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        if self.released.is_set():
            return False
        if not self.labels:
            return bool(super().create(name, namespace, election_record))
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=name, labels=dict(self.labels)),
            spec=self.get_lease_spec(election_record),
        )
        try:
            self.lease_reference = self.api_instance.create_namespaced_lease(namespace, body)
            return True
        except ApiException:
            return False

    def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        if self.released.is_set():
            return False
        lease = self.lease_reference
        if self.labels and lease is not None and lease.metadata is not None:  # a Lease made without them
            lease.metadata.labels = {**(lease.metadata.labels or {}), **self.labels}
        return bool(super().update(name, namespace, updated_record))


class _Election(leaderelection.LeaderElection):
    """The library's election, telling ``on_renewed`` when each attempt that succeeded began: the
    Lease's renewTime is that moment too, and a standby counts the lease duration from later."""

    def __init__(self, config: Any, on_renewed: Callable[[float], None]) -> None:
        super().__init__(config)
        self._on_renewed = on_renewed

    def try_acquire_or_renew(self) -> bool:
        began = lease_clock()
        held = bool(super().try_acquire_or_renew())
        if held:
            self._on_renewed(began)
        return held


class Leadership:
    """One candidate. ``on_lost`` runs (in the election thread) when a held lease could not be
    renewed; the default ends the process, as a leader that may be superseded must not act on.
    ``on_renewed`` is told when each renewal that succeeded began (on ``watchdog.lease_clock``)."""

    def __init__(
        self,
        api: client.ApiClient,
        settings: LeaderSettings,
        on_lost: Callable[[], None] | None = None,
        on_renewed: Callable[[float], None] | None = None,
    ) -> None:
        self.settings = settings
        self._lock = _Lock(api, settings)
        self._leading = threading.Event()
        self._on_lost = on_lost or exit_now
        config = electionconfig.Config(
            self._lock,
            lease_duration=settings.lease_duration,
            renew_deadline=settings.renew_deadline,
            retry_period=settings.retry_period,
            onstarted_leading=self._leading.set,
            onstopped_leading=self._stopped,
        )
        self._election = _Election(config, on_renewed or (lambda began: None))
        self._thread = threading.Thread(target=self._election.run, name="leader-election", daemon=True)
        # The library logs every retry of a standby at INFO; our own lines say what matters.
        logging.getLogger("leaderelection").setLevel(logging.WARNING)

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    @property
    def holder(self) -> str | None:
        record = self._election.observed_record
        return getattr(record, "holder_identity", None) if record is not None else None

    def start(self) -> None:
        s = self.settings
        log.info("leader election: candidate %s for Lease %s/%s", s.identity, s.namespace, s.name)
        self._thread.start()

    def wait_until_leading(self, stop: threading.Event) -> bool:
        """Block until this candidate holds the lease (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            if self._leading.wait(0.2):
                s = self.settings
                log.info("leader election: %s now holds Lease %s/%s", s.identity, s.namespace, s.name)
                return True
        return False

    def alive(self) -> bool:
        """The election thread is running (a standby that stopped competing is not healthy)."""
        return self._thread.is_alive()

    def _stopped(self) -> None:
        if self._lock.released.is_set():
            return
        self._leading.clear()
        log.error(
            "leader election: lost Lease %s/%s (not renewed within %ss); stopping so that only the "
            "new leader acts",
            self.settings.namespace,
            self.settings.name,
            self.settings.renew_deadline,
        )
        self._on_lost()

    def release(self) -> None:
        """Give the lease up on a deliberate shutdown: a standby takes over at its next retry."""
        self._lock.released.set()
        if not self._leading.is_set():
            return
        self._leading.clear()
        s = self.settings
        api = self._lock.api_instance
        for _ in range(3):  # a renewal still in flight makes the first attempt conflict
            try:
                lease = api.read_namespaced_lease(s.name, s.namespace)
                if lease.spec is None or lease.spec.holder_identity != s.identity:
                    return
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                api.replace_namespaced_lease(s.name, s.namespace, lease)
                log.info("leader election: released Lease %s/%s", s.namespace, s.name)
                return
            except ApiException as exc:
                if exc.status != 409:
                    break
        # Not fatal: the lease then expires on its own after the lease duration.
        log.warning("leader election: could not release Lease %s/%s", s.namespace, s.name)
