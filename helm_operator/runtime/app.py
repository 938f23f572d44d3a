"""The application: builds every adapter and the kopf registry once, then runs the operator.

Nothing is set on it after construction and nothing global is changed for helm's sake: the
kubernetes client gets its own configuration object, kopf logs in with the same credentials, and
helm is told where the kubeconfig and the post-renderer are through its own flags and wrapper (with
leader election the kubeconfig names the operator's relay, ``adapters/relay.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, cast

import kopf
import prometheus_client
from kubernetes import client, config

from helm_operator.adapters.apisession import bounded_session
from helm_operator.adapters.discovery import Discovery
from helm_operator.adapters.helm import Helm, HelmSettings
from helm_operator.adapters.kube import Kube
from helm_operator.adapters.metrics import LEADER, QUEUE_DEPTH, ReleaseStates
from helm_operator.adapters.relay import Relay
from helm_operator.adapters.release_index import ReleaseIndex
from helm_operator.adapters.report import Reporter
from helm_operator.config.sharding import Ring, Shard, describe
from helm_operator.config.watches import (
    Watch,
    WatchesError,
    selector_matches,
    selector_query,
)
from helm_operator.core.lease import Gate, open_gate
from helm_operator.core.locks import Concurrency
from helm_operator.core.naming import FINALIZER
from helm_operator.drift.dependents import Change, DependentWatches
from helm_operator.drift.scheduler import DriftChecker, DriftScheduler
from helm_operator.hooks import conversion
from helm_operator.hooks.day2 import Day2
from helm_operator.hooks.registry import Hooks
from helm_operator.release.state import RetryPolicy
from helm_operator.runtime import allocator, preflight, rollouts
from helm_operator.runtime.fence import Fence, FencedApiClient
from helm_operator.runtime.handlers import OutageLogFilter, configure, register, resource_key
from helm_operator.runtime.kopf_discovery import adapt_kopf_observation
from helm_operator.runtime.leader import LeaderSettings, Leadership
from helm_operator.runtime.probes import Probes, serve
from helm_operator.runtime.resyncs import Resyncs
from helm_operator.runtime.services import Runtime
from helm_operator.runtime.sweeper import in_patterns, sweep_terminating
from helm_operator.runtime.webhook import ConversionWebhook, WebhookSettings

log = logging.getLogger(__name__)

KUBE_THREADS = 64  # threads for blocking API calls (idle ones cost no CPU)
TRIM_EVERY = 30.0  # seconds between returns of freed heap to the kernel
_WORKDIR_PREFIX = "helm-operator-"


@dataclass(frozen=True)
class Settings:
    watches: Sequence[Watch]
    namespaces: Sequence[str] = ()  # kopf patterns; empty: cluster-wide
    kubeconfig: str | None = None  # None: in-cluster service account
    helm: str = "helm"
    max_helm_processes: int = 4
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    chart_cache: Path = Path.home() / ".cache/helm-operator/charts"
    metrics_bind: tuple[str, int] | None = None  # None: no metrics endpoint
    probes_bind: tuple[str, int] | None = None  # None: no /healthz and /readyz
    leader: LeaderSettings | None = None  # None: no election, this process acts at once
    conversion: WebhookSettings | None = None  # where the conversion webhook serves (hooks with converters)
    hooks: Mapping[str, Hooks] = field(default_factory=dict)  # watch key -> its loaded hook module
    shard: Shard = None  # static sharding (``config.sharding``): None serves every resource
    ring: Ring | None = None  # dynamic sharding: this instance's shard of a ControllerRing


def _kube_configuration(kubeconfig: str | None) -> client.Configuration:
    cfg = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    # A pooled connection per thread: with the client's default (5 per core) the calls beyond it
    # each made a new TLS connection and dropped it after one request.
    cfg.connection_pool_maxsize = KUBE_THREADS
    return cfg


def _connection_info(cfg: client.Configuration) -> kopf.ConnectionInfo:
    """kopf's credentials from the same configuration the kubernetes client uses."""
    keys = cfg.api_key or {}
    # The client keeps a kubeconfig's token under "BearerToken" (older releases: "authorization").
    token = keys.get("authorization") or keys.get("BearerToken") or ""
    scheme, _, value = token.partition(" ")
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
        scheme=scheme or None,
        token=value or None,
    )


def kopf_identity(leader: LeaderSettings | None) -> str:
    """kopf's name for this process, given rather than guessed: kopf's guess asks the password
    database for the user's name, which has no entry for a uid the image or the cluster picks
    (the image's 65532, any ``runAsUser``), and the operator would stop as it starts."""
    return leader.identity if leader is not None else f"{socket.gethostname()}/{os.getpid()}"


def _reap_workdirs(base: Path) -> None:
    """Remove post-renderer folders left by operator processes that no longer run."""
    for d in base.glob(f"{_WORKDIR_PREFIX}*"):
        m = re.match(rf"{_WORKDIR_PREFIX}(\d+)-", d.name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            shutil.rmtree(d, ignore_errors=True)


class App:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # Set on SIGTERM/SIGINT once the operator has started (an asyncio.Event binds to kopf's
        # loop when kopf first waits on it; a threading.Event would hold an executor thread).
        self._stop = asyncio.Event()
        # The kubernetes client's urllib3 logs every connection retry; our adapters say it once.
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
        # pyhelm3 logs each failed helm command line (hundreds of characters, no reason); the
        # reconcile logs the failure once, reason first, and puts it on the resource.
        logging.getLogger("pyhelm3").setLevel(logging.ERROR)
        outage = OutageLogFilter()
        for handler in logging.getLogger().handlers:
            handler.addFilter(outage)
        self.kube_config = _kube_configuration(settings.kubeconfig)
        # With leader election every helm process and every API write passes the lease's gate.
        self.fence: Fence | None = None
        gate: Gate = open_gate
        if settings.leader is not None:
            lease = f"{settings.leader.namespace}/{settings.leader.name}"
            self.fence = Fence(settings.leader.renew_deadline, lease=lease, watchdog=True)
            gate = self.fence.check
        api = FencedApiClient(self.kube_config, gate) if self.fence else client.ApiClient(self.kube_config)
        self.kube = Kube(api)
        self.discovery = Discovery(self.kube.api)
        base = Path(tempfile.gettempdir())
        _reap_workdirs(base)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{_WORKDIR_PREFIX}{os.getpid()}-", dir=base))
        # With leader election helm's own requests pass the gate too: through the operator.
        self.relay = Relay(self.kube_config, gate, self.workdir) if self.fence is not None else None
        helm_kubeconfig = Path(settings.kubeconfig) if settings.kubeconfig else None
        self.helm = Helm(
            HelmSettings(
                executable=settings.helm,
                kubeconfig=self.relay.kubeconfig if self.relay is not None else helm_kubeconfig,
                max_processes=settings.max_helm_processes,
                workdir=self.workdir,
                chart_cache=settings.chart_cache,
            ),
            gate=gate,
        )
        self.reporter = Reporter(self.kube)
        # Helm 4 writes as field manager "helm"; Helm 3 as its executable's name.
        self.dependents = DependentWatches(
            self.kube,
            notify=self._dependent_changed,
            ours={Path(settings.helm).name},
            shard=settings.shard,
            ring=settings.ring,
        )
        # Namespace patterns that are plain names can be listed and watched one by one.
        self._globbed = any(c in n for n in settings.namespaces for c in "*?[!")
        namespaces = [] if self._globbed else list(settings.namespaces)
        by_release = settings.ring is not None  # a ring's label never reaches Helm's Secrets
        self.releases = ReleaseIndex(self.kube.api, namespaces, shard=settings.shard, by_release=by_release)
        self.checker = DriftChecker(
            self.kube, self.reporter, dependents=self.dependents, releases=self.releases
        )
        concurrency = Concurrency()
        day2 = None
        hooked = {k: h for k, h in settings.hooks.items() if h.hooks}  # converters alone are no day-2
        if hooked:
            sharded = settings.shard is not None or settings.ring is not None
            pause = self.checker.pause
            day2 = Day2(hooked, self.kube, self.reporter, concurrency, pause=pause, sharded=sharded)
        self.runtime = Runtime(
            helm=self.helm,
            kube=self.kube,
            discovery=self.discovery,
            reporter=self.reporter,
            drift=self.checker,
            concurrency=concurrency,
            retry=settings.retry,
            day2=day2,
            releases=self.releases,
        )
        self.drift = DriftScheduler(self.checker, self.runtime.concurrency)
        self.registry = kopf.OperatorRegistry()
        self.probes = Probes()
        self.probes.ready_check("dependent watches", self.dependents.unsynced)
        self.states = ReleaseStates()
        self.resyncs = Resyncs()
        self.leadership: Leadership | None = None
        self.webhook: ConversionWebhook | None = None
        if settings.leader is not None and self.fence is not None:
            # Its own client: the Lease is written before this replica leads, and past no gate.
            self.leadership = Leadership(
                client.ApiClient(self.kube_config),
                settings.leader,
                on_lost=self.fence.lost,
                on_renewed=self.fence.renewed,
            )
            self.probes.live_check("leader election", self._election_alive)
        self._tasks: set[asyncio.Task[None]] = set()

    def _election_alive(self) -> str | None:
        return None if self.leadership is None or self.leadership.alive() else "election thread stopped"

    def _wake(self, watch: Watch, keys: Sequence[str]) -> None:
        """Resources a rollout let go of (``<namespace>/<name>``): reconciled at the next sweep."""
        found = (k.rpartition("/") for k in keys)  # "<namespace>/<name>", or "<name>" cluster-scoped
        self.resyncs.soon(resource_key(watch, ns or None, name) for ns, _, name in found)

    def _dependent_changed(self, owner: str, change: Change) -> None:
        """Called from a dependent watch's thread: hand the owner to the drift scheduler's loop."""
        self.drift.poke_threadsafe(owner, change)

    def resolve_watches(self) -> list[Watch]:
        return preflight.resolve_watches(
            self.discovery, self.settings.watches, self.settings.shard, self.settings.ring
        )

    def _start_webhook(self) -> None:
        """Every replica serves conversions, before it waits for a lease."""
        kinds = conversion.kinds(self.settings.watches, self.settings.hooks)
        if not kinds:
            return
        if self.settings.conversion is None:
            raise WatchesError("hooks", "converters are declared but the conversion webhook has no address")
        self.webhook = ConversionWebhook(
            client.ApiClient(self.kube_config), self.settings.conversion, kinds, self.workdir
        )
        self.webhook.start()

    def _wire(self, watches: Sequence[Watch]) -> None:
        registry, runtime, drift = self.registry, self.runtime, self.drift
        creds = _connection_info(self.kube_config) if self.settings.kubeconfig else None

        @kopf.on.login(registry=registry)
        async def _login(**kwargs: Any) -> kopf.AiohttpSession | None:
            info: kopf.ConnectionInfo | None = creds
            if info is None:  # in-cluster: read again at every login (the token rotates)
                info = kopf.login_with_service_account(**kwargs)
            gate = self.fence.check if self.fence is not None else open_gate  # kopf's own writes too
            return bounded_session(info, gate=gate) if info is not None else None

        def stopping(signum: signal.Signals) -> None:
            """SIGTERM/SIGINT: from this moment no new Helm action and no day-2 run, action or
            watch hook starts (those in flight finish); then kopf stops as on its own signal."""
            log.info("%s received: stopping; nothing new starts, what runs finishes", signum.name)
            runtime.draining = True
            if runtime.day2 is not None:
                runtime.day2.drain()
            self._stop.set()

        @kopf.on.startup(registry=registry)
        async def _startup(settings: kopf.OperatorSettings, **_: Any) -> None:
            configure(settings, watches)
            loop = asyncio.get_running_loop()
            # Every blocking kubernetes-client call runs in a thread. asyncio's default pool has
            # nproc+4 threads: on a small node that, not helm, capped how many reconciles progressed.
            loop.set_default_executor(ThreadPoolExecutor(max_workers=KUBE_THREADS, thread_name_prefix="kube"))
            self.releases.start()
            loops = [
                self._heartbeat(),
                self._trimming(),
                sweep_terminating(
                    runtime, watches, self.settings.namespaces, drift, self.resyncs, self.states
                ),
                self.resyncs.run(),
            ]
            if any(w.rollout is not None for w in watches):
                patterns = self.settings.namespaces
                plain = [] if self._globbed else list(patterns)
                driver = rollouts.Driver(
                    self.kube,
                    self.reporter,
                    watches,
                    runtime.rollout_of,
                    lambda ns: ns is None or not patterns or in_patterns(ns, patterns),
                    plain,
                    self._wake,
                )
                loops.append(driver.run())
            for coro in loops:
                task = loop.create_task(coro)
                self._tasks.add(task)
            # Before kopf's watch streams start: what readiness waits for to be handled once.
            try:
                self.probes.expect(await asyncio.to_thread(self._first_listing, watches))
            except Exception as exc:  # readiness then only waits for the caches; nothing else depends on it
                log.warning("could not list the watched resources for readiness: %s", exc)
                self.probes.expect(())
            # kopf installs its signal handlers just after its startup activities begin; ours,
            # installed once they are done, replace them and stop kopf through its stop flag.
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.call_soon(loop.add_signal_handler, signum, stopping, signum)

        @kopf.on.cleanup(registry=registry)
        async def _cleanup(**_: Any) -> None:
            runtime.draining = True
            for task in self._tasks:  # endless loops: kopf would wait 5 s for them before cancelling
                task.cancel()
            await self.resyncs.stop()
            self.dependents.stop()
            self.releases.stop()
            if runtime.day2 is not None:
                runtime.day2.stop()

        for watch in watches:
            register(watch, runtime, registry, drift, self.probes, self.states, self.resyncs)
            QUEUE_DEPTH.labels(watch=watch.key).set_function(partial(runtime.concurrency.queued, watch.key))
            log.info(
                "watching %s (%s, %s) -> chart %s",
                watch.kind,
                watch.api_version,
                watch.plural,
                watch.chart.ref,
            )

    async def _heartbeat(self) -> None:
        """The liveness probe's evidence that the event loop turns."""
        while True:
            self.probes.beat()
            await asyncio.sleep(1.0)

    @staticmethod
    async def _trimming() -> None:
        """Freed heap back to the kernel now and then: a wave's parsed bodies are garbage a
        second later, and glibc keeps their pages otherwise."""
        while True:
            await asyncio.sleep(TRIM_EVERY)
            await asyncio.to_thread(allocator.trim)

    def _first_listing(self, watches: Sequence[Watch]) -> list[str]:
        """Every custom resource the operator will handle on start (selector and namespaces applied)."""
        patterns, globbed = self.settings.namespaces, self._globbed
        found = []
        for watch in watches:
            namespaced = patterns and not globbed and watch.scope == "Namespaced"
            selected = selector_query(watch.selector) if watch.selector else None
            for ns in list(patterns) if namespaced else [None]:
                for item in self.kube.list_custom(watch.api_version, watch.served_plural, ns, selected):
                    meta = item["metadata"]
                    if meta.get("deletionTimestamp") and FINALIZER not in (meta.get("finalizers") or []):
                        continue  # going away without us: kopf calls no handler for it
                    if globbed and meta.get("namespace") and not in_patterns(meta["namespace"], patterns):
                        continue
                    if watch.selector and not selector_matches(watch.selector, meta.get("labels") or {}):
                        continue
                    found.append(resource_key(watch, meta.get("namespace"), meta["name"]))
        return found

    def _wait_for_lease(self) -> bool:
        """A standby blocks here (answering probes) until it leads; False if told to stop first."""
        assert self.leadership is not None
        stop = threading.Event()

        def stopping(signum: int, frame: Any) -> None:
            stop.set()

        previous = {s: signal.signal(s, stopping) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.probes.role = "standby"
            self.leadership.start()
            return self.leadership.wait_until_leading(stop)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def run(self) -> int:
        try:
            if self.settings.metrics_bind is not None:
                host, port = self.settings.metrics_bind
                prometheus_client.start_http_server(port, addr=host)
                log.info("metrics on %s:%d/metrics", host, port)
            if self.settings.probes_bind is not None:
                serve(self.settings.probes_bind, self.probes)
            self._start_webhook()
            preflight.refuse_rollouts_in_a_ring(self.settings.watches, self.settings.ring)
            if self.leadership is not None and not self._wait_for_lease():
                return 0
            if self.fence is not None:
                self.fence.arm()
            if self.relay is not None:
                self.relay.start()  # before any helm process: a leader's alone
            watches = self.resolve_watches()  # after the wait: a standby may wait for days
            preflight.check_rollouts(self.kube, watches)
            preflight.check_conversions(client.ApiClient(self.kube_config), self.webhook, watches)
            LEADER.set(1)
            self.probes.lead()
            self._wire(watches)
            adapt_kopf_observation()
            # No `helm version` here: a restart must not start a single helm process when nothing changed.
            names = ", ".join(self.settings.namespaces) or "all"
            ring = self.settings.ring
            serves = (
                f"shard {ring.shard} of ControllerRing {ring.name}" if ring else describe(self.settings.shard)
            )
            log.info("helm: %s; namespaces: %s; %s", self.settings.helm, names, serves)
            for w in watches:  # which module each kind's hooks came from, and what it declares
                if w.hooks and (declared := self.settings.hooks.get(w.key)) is not None:
                    log.info("%s: hooks %s: %s", w.key, w.hooks, declared.summary())
            kopf.run(
                registry=self.registry,
                clusterwide=not self.settings.namespaces,
                namespaces=list(self.settings.namespaces),
                standalone=True,
                stop_flag=self._stop,
                # kopf's Identity is a NewType of str that kopf does not export.
                identity=cast(Any, kopf_identity(self.settings.leader)),
            )
        finally:
            if self.webhook is not None:
                self.webhook.stop()
            if self.fence is not None:
                self.fence.disarm()  # before the lease is handed over: nothing acts after that
            if self.relay is not None:
                self.relay.stop()
            if self.leadership is not None:
                self.leadership.release()
            LEADER.set(0)
            self.close()
        return 0

    def close(self) -> None:
        """Remove the operator's work folder (every start makes its own)."""
        with contextlib.suppress(OSError):
            shutil.rmtree(self.workdir)
