"""The adapters and shared state of one operator process, built once by the application and
handed to ``reconcile``, ``finalize``, the handlers and the sweepers (a module of its own, so the
modules that use it never import each other for it)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from helm_operator.adapters.discovery import Discovery
from helm_operator.adapters.helm import Helm
from helm_operator.adapters.kube import Kube
from helm_operator.adapters.release_index import ReleaseIndex
from helm_operator.adapters.report import Reporter
from helm_operator.config.charts import ChartInfo, ChartRef, load_chart
from helm_operator.config.watches import Watch
from helm_operator.core.locks import Concurrency
from helm_operator.drift.scheduler import DriftChecker
from helm_operator.hooks.day2 import Day2
from helm_operator.release.attempts import Attempts
from helm_operator.release.dependencies import Dependents
from helm_operator.release.rollout import fleet_digest, rollout_id
from helm_operator.release.state import RetryPolicy

CHART_RESTAT = 5.0  # seconds a local chart's files are not looked at again


@dataclass(frozen=True)
class Settled:
    """What a reconcile that had nothing to do saw (recorded once its status is written)."""

    uid: str | None
    generation: int
    chart: ChartInfo
    storage: str  # the release's storage fingerprint
    since: float  # time.monotonic() of the reads it rests on
    status: str = ""  # digest of the status as written


@dataclass
class Runtime:
    """The adapters and shared state of one operator process, built once by the application."""

    helm: Helm
    kube: Kube
    discovery: Discovery
    reporter: Reporter
    drift: DriftChecker
    concurrency: Concurrency = field(default_factory=Concurrency)
    day2: Day2 | None = None  # the watches' day-2 hooks (None: no watch names any)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # Failure memory per release, newer than the CR status a handler may have been given.
    attempts: dict[str, Attempts] = field(default_factory=dict)
    draining: bool = False
    releases: ReleaseIndex | None = None  # fingerprints of Helm's storage (None: always read it)
    # release key -> what the last reconcile found in sync (for resyncs decided from memory)
    settled: dict[str, Settled] = field(default_factory=dict)
    dependents: Dependents = field(default_factory=Dependents)  # who depends on whom (uninstall order)
    # release key -> the action request last warned about (a kind without day-2 hooks runs none)
    unheard: dict[str, str] = field(default_factory=dict)
    # resource keys whose delete handler runs now (the sweep of terminating namespaces leaves them)
    deleting: set[str] = field(default_factory=set)
    _charts: dict[str, tuple[float, float, ChartInfo]] = field(default_factory=dict)

    async def local_chart(self, watch: Watch, chart: ChartRef | None = None) -> ChartRef:
        """The chart (default: the watch's newest) as a local directory or .tgz; remote charts are
        pulled once into the cache."""
        chart = chart or watch.chart
        if chart.is_local:
            return chart
        path = await self.helm.pull(chart)
        return ChartRef(ref=chart.ref, path=path, version=chart.version)

    async def rollout_of(self, watch: Watch) -> str:
        """The watch's current rollout: the fleet inputs of every chart version it serves."""
        fleets = []
        for _, ref in watch.versions or (("", watch.chart),):
            info = self.chart(await self.local_chart(watch, ref))
            fleets.append(fleet_digest(info.name, info.version, info.content_digest, watch.override_values))
        return rollout_id(fleets)

    def chart(self, ref: ChartRef) -> ChartInfo:
        """Chart metadata, cached until a file of the chart changes (looked at every few seconds)."""
        path = ref.path
        assert path is not None
        now = time.monotonic()
        cached = self._charts.get(str(path))
        if cached and now - cached[0] < CHART_RESTAT:
            return cached[2]
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        stamp = max((p.stat().st_mtime for p in files), default=0.0) + len(files)
        if cached and cached[1] == stamp:
            self._charts[str(path)] = (now, stamp, cached[2])
            return cached[2]
        info = load_chart(ref)
        self._charts[str(path)] = (now, stamp, info)
        return info
