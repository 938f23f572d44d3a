"""A capacity model on paper: how many operator replicas N custom resources need, how long a full
update wave takes, what the fleet asks of the API server while idle, how much etcd and the API
server's watch cache hold, and from which N the API server rather than the operator is the limit.

Every per-resource cost comes from this repository's committed measurements (bench/results): the
main benchmark's runs at N = 100, 500 and 1000 (``bench-*-n<N>.json``, the operator's process alone),
the static-shards run (sharding.md), the many-CRDs run (many-crds.md) and the operator's own
defaults (``Watch``). What was not measured is a named constant below that says so. The API
server's figures are published defaults and thresholds, each with its source. The model is
linear in N and ceil-based in replicas; it is extrapolated from one 2-core machine.

    python -m bench.capacity                    # print the model for N = 1000, 10k, 50k, 100k
    python -m bench.capacity --write            # write bench/results/capacity.md
    python -m bench.capacity --rss-limit-mib 1024 --cpu-limit 2 --n 20000
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helm_operator.config.watches import Watch

RESULTS = Path(__file__).resolve().parent / "results"
OUT = RESULTS / "capacity.md"
MEASURED_NS = (100, 500, 1000)  # the main benchmark's N, one full run each
REF_N = 1000  # per-change costs are taken where they are best amortised
DEFAULT_NS = (1000, 10_000, 50_000, 100_000)
CONTENDER = "ours"
MiB, GiB = 1024**2, 1024**3

# -- measured once outside the benchmark (no cluster: ``helm install --dry-run=client``) ------------
# The bench chart's release as Helm stores it: the release JSON gzipped and base64-encoded, which
# is what a release Secret's ``data.release`` holds (etcd keeps those bytes). Measured 2026-11-26
# with helm v4.3.1 on bench/charts/podinfo and wave-1 values:
RELEASE_MEASURE_COMMAND = (
    "helm install podinfo-0001 bench/charts/podinfo -n bench --values wave.yaml --dry-run=client -o json"
    " | gzip -9 | base64 -w0 | wc -c"
)
RELEASE_DATA_BYTES = 5680  # one revision's Secret payload, without its metadata (not measured)
MANIFEST_BYTES = 3171  # the rendered ConfigMap + Service + Deployment: a floor for their stored size

# -- not measured: estimated from the calls one upgrade makes --------------------------------------
# The benchmark counted API requests only while idle (apiserver_request_total has no client label,
# and the audit log here records lists and watches only), so the requests of one change are
# counted from what the code does, not measured. The first thing to measure at scale.
WRITES_PER_CHANGE: dict[str, int] = {
    "Helm: the new revision's Secret (created pending, then deployed)": 2,
    "Helm: the previous revision marked superseded": 1,
    "Helm: server-side apply of each chart object (ConfigMap, Service, Deployment)": 3,
    "Helm: the revision beyond historyMax deleted (once history is full)": 1,
    "operator: status patches (Reconciling, then Released/Ready)": 2,
    "operator: the Event naming the action": 1,
}
READS_PER_CHANGE = 3  # Helm's two listings of the release's history, one read of the resource

# -- published API server and etcd figures ----------------------------------------------------------
ETCD_DEFAULT_QUOTA = 2 * GiB  # etcd --quota-backend-bytes default
ETCD_SUGGESTED_MAX = 8 * GiB  # "a suggested maximum size for normal environments"
ETCD_SOURCE = "https://etcd.io/docs/latest/dev-guide/limit/ (System limits: storage size limit)"
MUTATING_INFLIGHT = 200  # kube-apiserver --max-mutating-requests-inflight default
READONLY_INFLIGHT = 400  # kube-apiserver --max-requests-inflight default
INFLIGHT_SOURCE = "kube-apiserver reference (--max-requests-inflight, --max-mutating-requests-inflight)"
MUTATING_P99_SLO_S = 1.0  # SLO: mutating calls for single objects, p99 per cluster-day <= 1 s
SLO_SOURCE = "kubernetes/community sig-scalability/slos/api_call_latency.md"
THRESHOLD_SOURCE = "kubernetes/community sig-scalability/configs-and-limits/thresholds.md"
# Published thresholds that the bench chart's objects (one Service, one Deployment and one Pod per
# resource) run into: (quantity, scope, threshold, objects per resource).
THRESHOLDS: tuple[tuple[str, str, int, int], ...] = (
    ("Services", "cluster", 10_000, 1),
    ("Services", "namespace", 5_000, 1),
    ("Deployments", "namespace", 2_000, 1),
    ("Pods", "namespace", 3_000, 1),
    ("Pods", "cluster", 150_000, 1),
)


# -- fitting ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Line:
    """y = intercept + slope * n: a fixed part per replica and a part per resource."""

    intercept: float
    slope: float

    def at(self, n: float) -> float:
        return self.intercept + self.slope * n


def fit(points: Sequence[tuple[float, float]]) -> Line:
    """Least squares through the measured points; a negative slope (noise) is taken as zero."""
    if len(points) < 2:
        raise ValueError("a line needs two points")
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = max(0.0, sum((x - mx) * (y - my) for x, y in points) / sxx)
    return Line(my - slope * mx, slope)


# -- reading the committed results (pure parsers; ``load`` is the only I/O) -------------------------
def md_table(text: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table whose header starts with ``first_header``; a blank
    cell repeats the row above's (continuation rows, as sharding.md writes them)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = _cells(line)
        if cells and cells[0] == first_header:
            rows: list[dict[str, str]] = []
            for row_line in lines[i + 2 :]:
                if not row_line.startswith("|"):
                    break
                row = dict(zip(cells, _cells(row_line), strict=False))
                if rows:
                    row = {k: v or rows[-1][k] for k, v in row.items()}
                rows.append(row)
            return rows
    raise ValueError(f"no table with a {first_header!r} column")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []


def _number(cell: str) -> float:
    match = re.match(r"[\d.]+", cell)
    if not match:
        raise ValueError(f"not a number: {cell!r}")
    return float(match.group())


@dataclass(frozen=True)
class Wave:
    """One kind of change applied to every resource at once (the benchmark's install or update
    wave at REF_N, one replica): what each change costs and how long a helm call is in flight."""

    operator_cpu: float  # CPU s of the operator process per change
    helm_cpu: float  # CPU s of helm and the post-renderer per change
    helm_calls: float  # helm processes per change
    call_s: float  # mean time one helm call is in flight (Little's law over the wave)
    occupancy: float  # mean helm processes in flight / concurrency
    seconds: float  # the wave at REF_N (what the model must give back)
    points: tuple[tuple[int, float], ...]  # the wave at each measured N

    @property
    def cpu(self) -> float:
        return self.operator_cpu + self.helm_cpu


def _wave(runs: dict[int, dict[str, Any]], scenario: str) -> Wave:
    w = _ours(runs[REF_N])[scenario]
    calls = w.get("helm_subcommands") or {}
    in_flight = float(w["helm_parallel_mean"])
    return Wave(
        operator_cpu=float(w["own_cpu_s"]) / REF_N,
        helm_cpu=(float(w["cpu_s"]) - float(w["own_cpu_s"])) / REF_N,
        helm_calls=(int(calls.get("upgrade", 0)) + int(calls.get("install", 0))) / REF_N,
        call_s=float(w["seconds"]) * in_flight / REF_N,
        occupancy=in_flight / int(runs[REF_N]["config"]["concurrency"]),
        seconds=float(w["seconds"]),
        points=tuple((n, float(_ours(runs[n])[scenario]["seconds"])) for n in sorted(runs)),
    )


@dataclass(frozen=True)
class Measured:
    """Per-resource and per-replica costs, each from a committed measurement (``sources``)."""

    sources: dict[str, str]
    commit: str
    rss_mib: Line  # steady RSS of one replica against the resources it serves
    rss_points: tuple[tuple[int, float], ...]
    idle_cpu_cores: Line  # steady idle CPU (second half of the idle window)
    idle_cpu_points: tuple[tuple[int, float], ...]
    idle_rps: Line  # API requests/s while idle, net of the background (second half)
    idle_rps_points: tuple[tuple[int, float], ...]
    idle_requests_by: tuple[tuple[str, float], ...]  # per replica at REF_N, second half, net: per s
    drift_p50_s: tuple[tuple[int, float], ...]  # drift correction latency at each measured N
    restart_s: Line  # a restart until every resource is handled again
    restart_points: tuple[tuple[int, float], ...]
    update: Wave  # one value changed in every resource: one helm upgrade each
    install: Wave  # every resource new: its first release
    concurrency: int  # helm processes per replica in the benchmark
    cached_per_resource: float  # objects in the dependent-watch caches per resource (sharding.md)
    shard_shares: tuple[tuple[int, float, float], ...]  # (k, cached share, CPU share) per instance
    shard_rss: tuple[tuple[float, float], ...]  # (resources per instance, RSS MiB), sharding.md
    start_peak_mib: float  # start-up peak above the steady RSS with 500 unrelated CRDs installed
    reconcile_period_s: float  # the operator's default resync period (Watch)
    history_max: int  # the operator's default historyMax (Watch)


def latest_run(results: Path, n: int) -> Path:
    """The newest full run of the main benchmark at ``n`` (``bench-<date>-n<n>.json``)."""
    found = sorted(results.glob(f"bench-*-n{n}.json"))
    if not found:
        raise FileNotFoundError(f"no bench-*-n{n}.json in {results}")
    return found[-1]


def _ours(doc: dict[str, Any], contender: str = CONTENDER) -> dict[str, Any]:
    for run in doc["runs"]:
        if run["contender"] == contender:
            return dict(run)
    raise ValueError(f"no {contender!r} run")


def _second_half_net_rps(doc: dict[str, Any]) -> float:
    """Requests/s of the idle window's second half, ours minus the floor's (the same objects, no
    operator). The first half still carries the drift scenario's tail at N >= 500 (its quiesce
    wait ran out), so only the second half is steady state."""
    ours, floor = _ours(doc)["idle"], _ours(doc, "helm")["idle"]
    half = float(ours["seconds"]) / 2
    return max(0.0, (float(ours["requests_second_half"]) - float(floor["requests_second_half"])) / half)


def _idle_requests_by(doc: dict[str, Any]) -> tuple[tuple[str, float], ...]:
    """The idle second half's requests/s by verb and resource, ours minus the floor's, biggest first."""
    ours, floor = _ours(doc)["idle"], _ours(doc, "helm")["idle"]
    half = float(ours["seconds"]) / 2
    net = {
        what: (float(counts[1]) - float(floor["requests_by"].get(what, [0, 0])[1])) / half
        for what, counts in ours["requests_by"].items()
    }
    return tuple(sorted(((w, r) for w, r in net.items() if r > 0), key=lambda x: -x[1]))


def _drift_p50(doc: dict[str, Any]) -> float:
    latencies = sorted(
        math.inf if c["latency_s"] is None else float(c["latency_s"]) for c in _ours(doc)["drift"]["changes"]
    )
    return latencies[len(latencies) // 2]


def inputs_from(runs: dict[int, dict[str, Any]], sharding_md: str, many_crds_md: str) -> Measured:
    """The model's inputs from the parsed results (pure: the unit tests give it the real files)."""
    ns = sorted(runs)
    defaults: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(Watch)}
    rss = tuple((n, float(_ours(runs[n])["footprint"]["rss_steady_mib"])) for n in ns)
    cpu = tuple((n, float(_ours(runs[n])["idle"]["cpu_pct_second_half"]) / 100) for n in ns)
    rps = tuple((n, _second_half_net_rps(runs[n])) for n in ns)
    restart = tuple((n, float(_ours(runs[n])["restart"]["seconds"])) for n in ns)

    shards = md_table(sharding_md, "k")
    one = next(r for r in shards if r["k"] == "1")
    base_cached, base_cpu = _number(one["cached objects"]), _number(one["CPU s"])
    shares = tuple(
        (int(r["k"]), _number(r["cached objects"]) / base_cached, _number(r["CPU s"]) / base_cpu)
        for r in shards
        if r["k"] != "1" and r["instance"] == "s0"
    )
    shard_rss = tuple((_number(r["N"]) / _number(r["k"]), _number(r["RSS MiB"])) for r in shards)
    crds = {r["unrelated CRDs"]: r for r in md_table(many_crds_md, "unrelated CRDs")}
    with_crds = crds["500"]
    start_peak = _number(with_crds["peak MiB"]) - _number(with_crds["RSS MiB"])
    return Measured(
        sources={
            "main runs": ", ".join(f"N={n}: {runs[n]['_file']}" for n in ns),
            "sharding": "bench/results/sharding.md",
            "many CRDs": "bench/results/many-crds.md",
            "defaults": "helm_operator/config/watches.py (Watch)",
        },
        commit=str(runs[REF_N]["versions"].get("helm-operator", "?")),
        rss_mib=fit(rss),
        rss_points=rss,
        idle_cpu_cores=fit(cpu),
        idle_cpu_points=cpu,
        idle_rps=fit(rps),
        idle_rps_points=rps,
        idle_requests_by=_idle_requests_by(runs[REF_N]),
        drift_p50_s=tuple((n, _drift_p50(runs[n])) for n in ns),
        restart_s=fit(restart),
        restart_points=restart,
        update=_wave(runs, "update"),
        install=_wave(runs, "convergence"),
        concurrency=int(runs[REF_N]["config"]["concurrency"]),
        cached_per_resource=base_cached / _number(one["N"]),
        shard_shares=shares,
        shard_rss=shard_rss,
        start_peak_mib=start_peak,
        reconcile_period_s=float(defaults["reconcile_period"]),
        history_max=int(defaults["history_max"]),
    )


def load(results: Path = RESULTS) -> Measured:
    runs: dict[int, dict[str, Any]] = {}
    for n in MEASURED_NS:
        path = latest_run(results, n)
        runs[n] = {**json.loads(path.read_text()), "_file": path.name}
    return inputs_from(runs, (results / "sharding.md").read_text(), (results / "many-crds.md").read_text())


# -- the model -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Limits:
    """What a replica may use and what the API server is assumed to take (all parameters)."""

    rss_limit_mib: float = 512.0
    cpu_limit: float = 1.0  # cores; helm runs in the operator's container, so its CPU counts too
    reserve_mib: float | None = None  # None: the measured start-up peak (many-crds.md)
    concurrency: int | None = None  # helm processes per replica; None: as measured
    history_max: int | None = None  # None: the operator's default
    api_write_rps: float = MUTATING_INFLIGHT / MUTATING_P99_SLO_S
    writes_per_change: int = sum(WRITES_PER_CHANGE.values())
    etcd_quota_bytes: int = ETCD_DEFAULT_QUOTA


@dataclass(frozen=True)
class WavePlan:
    replica_rate: float  # changes/s one replica sustains
    rate_bound: str  # "helm concurrency" or "CPU limit"
    fleet_rate: float  # changes/s of the fleet, the API budget included
    bound: str  # what sets the wave's pace
    seconds: float
    cpu: float  # cores one replica uses during the wave
    writes_rps: float  # API writes/s the wave asks for at the replicas' own pace


@dataclass(frozen=True)
class Plan:
    n: int
    per_replica_max: int  # resources one replica holds within its memory
    replicas: int
    per_replica: int  # resources on the fullest replica
    rss_mib: float
    update: WavePlan  # one value changed in every resource
    install: WavePlan  # every resource new at once (the first rollout, or a replaced cluster)
    idle_cpu_cores: float  # per replica
    idle_rps: float  # the fleet's
    resyncs_per_s: float  # the fleet's, all decided from memory
    restart_s: float  # per replica
    cached_objects: float  # per replica: dependents + the resource + revision metadata
    release_secrets: int
    secret_bytes: int
    etcd_bytes: int  # a floor: release Secrets' payloads + rendered objects, no metadata or history
    etcd_share: float  # of the quota


def per_replica_max(m: Measured, lim: Limits) -> int:
    reserve = m.start_peak_mib if lim.reserve_mib is None else lim.reserve_mib
    room = lim.rss_limit_mib - reserve - m.rss_mib.intercept
    if room <= 0 or m.rss_mib.slope <= 0:
        raise ValueError(
            f"an RSS limit of {lim.rss_limit_mib:.0f} MiB leaves no room: a replica's fixed part is "
            f"{m.rss_mib.intercept:.0f} MiB plus {reserve:.0f} MiB for its start-up peak"
        )
    return math.floor(room / m.rss_mib.slope)


def replica_rate(m: Measured, lim: Limits, wave: Wave | None = None) -> tuple[float, str]:
    """Changes/s one replica sustains: its helm processes in flight over one call's time, or its
    CPU limit over one change's CPU (operator and helm), whichever is lower."""
    w = wave or m.update
    c = m.concurrency if lim.concurrency is None else lim.concurrency
    by_helm = c * w.occupancy / w.call_s
    by_cpu = lim.cpu_limit / w.cpu
    return (by_helm, "helm concurrency") if by_helm <= by_cpu else (by_cpu, "CPU limit")


def wave_plan(n: int, replicas: int, wave: Wave, m: Measured, lim: Limits) -> WavePlan:
    """A change to all N at once: the replicas' pace, unless their writes exceed the API budget."""
    rate, bound = replica_rate(m, lim, wave)
    api_rate = lim.api_write_rps / lim.writes_per_change
    fleet = min(replicas * rate, api_rate)
    return WavePlan(
        replica_rate=rate,
        rate_bound=bound,
        fleet_rate=fleet,
        bound=f"operator ({bound})" if replicas * rate <= api_rate else "API server write budget",
        seconds=n / fleet,
        cpu=fleet / replicas * wave.cpu,
        writes_rps=replicas * rate * lim.writes_per_change,
    )


def plan(n: int, m: Measured, lim: Limits) -> Plan:
    cap = per_replica_max(m, lim)
    replicas = max(1, math.ceil(n / cap))
    each = math.ceil(n / replicas)
    history = m.history_max if lim.history_max is None else lim.history_max
    secrets = n * history
    etcd = secrets * RELEASE_DATA_BYTES + n * MANIFEST_BYTES
    return Plan(
        n=n,
        per_replica_max=cap,
        replicas=replicas,
        per_replica=each,
        rss_mib=m.rss_mib.at(each),
        update=wave_plan(n, replicas, m.update, m, lim),
        install=wave_plan(n, replicas, m.install, m, lim),
        idle_cpu_cores=m.idle_cpu_cores.at(each),
        idle_rps=replicas * m.idle_rps.intercept + n * m.idle_rps.slope,
        resyncs_per_s=n / m.reconcile_period_s,
        restart_s=m.restart_s.at(each),
        cached_objects=each * (m.cached_per_resource + 1 + history),
        release_secrets=secrets,
        secret_bytes=secrets * RELEASE_DATA_BYTES,
        etcd_bytes=etcd,
        etcd_share=etcd / lim.etcd_quota_bytes,
    )


@dataclass(frozen=True)
class ApiLimit:
    """From which N the API server, not the operator, is the limit, by each criterion."""

    wave_replicas: float  # replicas whose wave writes fill the assumed write budget
    wave_n: int  # resources at which the memory-sized fleet reaches that many replicas
    etcd_n: int  # resources whose release history and objects fill the etcd quota
    etcd_max_n: int  # ... fill etcd's suggested maximum
    quota_bytes: int
    thresholds: tuple[tuple[str, str, int, int], ...]  # (quantity, scope, threshold, resources)

    def cluster_wide(self) -> list[tuple[int, str]]:
        """The cluster-scope criteria, soonest first."""
        named = [
            (self.wave_n, "the operator's writes during an update wave reach the assumed write budget"),
            (self.etcd_n, f"release history and objects fill etcd's quota ({self.quota_bytes / GiB:g} GiB)"),
            (self.etcd_max_n, f"they fill etcd's suggested maximum ({ETCD_SUGGESTED_MAX / GiB:g} GiB)"),
        ]
        named += [
            (n, f"the chart's {q} reach the published cluster threshold ({t:,})")
            for q, s, t, n in self.thresholds
            if s == "cluster"
        ]
        return sorted(named)

    @property
    def first_in_one_namespace(self) -> tuple[int, str]:
        """Per-namespace thresholds bind sooner, when the resources share a namespace."""
        return min((n, f"#{q} per namespace ({t:,})") for q, s, t, n in self.thresholds if s == "namespace")


def api_limit(m: Measured, lim: Limits) -> ApiLimit:
    rate, _ = replica_rate(m, lim)
    replicas = lim.api_write_rps / (rate * lim.writes_per_change)
    history = m.history_max if lim.history_max is None else lim.history_max
    per_resource = history * RELEASE_DATA_BYTES + MANIFEST_BYTES
    return ApiLimit(
        wave_replicas=replicas,
        wave_n=math.floor(replicas) * per_replica_max(m, lim) + 1,
        etcd_n=math.floor(lim.etcd_quota_bytes / per_resource),
        etcd_max_n=math.floor(ETCD_SUGGESTED_MAX / per_resource),
        quota_bytes=lim.etcd_quota_bytes,
        thresholds=tuple((q, s, t, t // per) for q, s, t, per in THRESHOLDS),
    )


# -- the report ------------------------------------------------------------------------------------
def _f(x: float, digits: int = 1) -> str:
    return f"{x:,.{digits}f}"


def _time(s: float) -> str:
    return f"{s:,.0f} s" if s < 120 else f"{s:,.0f} s ({s / 60:,.1f} min)"


def _row(label: str, value: str, how: str) -> str:
    return f"| {label} | {value} | {how} |"


def render(m: Measured, lim: Limits, ns: Sequence[int] = DEFAULT_NS, command: str = "") -> str:
    limit = api_limit(m, lim)
    ns_n, ns_why = limit.first_in_one_namespace
    reserve = m.start_peak_mib if lim.reserve_mib is None else lim.reserve_mib
    conc = m.concurrency if lim.concurrency is None else lim.concurrency
    history = m.history_max if lim.history_max is None else lim.history_max
    out = [
        "# Capacity model: replicas, update waves and the API server at 10k to 100k resources",
        "",
        f"`{command or 'python -m bench.capacity --write'}` (bench/capacity.py). A model on paper, "
        "computed from this repository's committed measurements of the operator serving the bench "
        f"chart (bench/charts/podinfo: a ConfigMap, a Service and a Deployment per resource) at "
        f"N = 100, 500 and 1000 on **one 2-core machine** (operator {m.commit}). Everything beyond "
        "N = 1000 is extrapolated linearly; nothing here was run at 10k or more.",
        "",
        "**Where the API server becomes the limit** (the operator scales out by replicas, static "
        "shards each doing ~1/k of the work, and is not the limit anywhere below):",
        "",
        *[f"- from about N = {n:,}: {why};" for n, why in limit.cluster_wide()],
        f"- with every resource in one namespace, already from N = {ns_n:,}: {ns_why}.",
        "",
        "## Per replica: limits (parameters) and what one replica sustains",
        "",
        "| | value | from |",
        "|---|---|---|",
        _row("RSS limit per replica", f"{lim.rss_limit_mib:.0f} MiB", "parameter (`--rss-limit-mib`)"),
        _row(
            "reserved for the start-up peak",
            f"{reserve:.0f} MiB",
            "many-crds.md: peak above steady RSS with 500 unrelated CRDs (`--reserve-mib`)",
        ),
        _row(
            "CPU limit per replica",
            f"{lim.cpu_limit:g} core",
            "parameter (`--cpu-limit`); helm's CPU counts too",
        ),
        _row("helm processes per replica", str(conc), "as the benchmark ran (`--helm-concurrency`)"),
        _row(
            "resources per replica (memory)",
            f"{per_replica_max(m, lim):,}",
            "(limit - reserve - fixed RSS) / RSS per resource, floored",
        ),
        *[
            _row(
                f"{what}/s per replica",
                "{:.2f} ({})".format(*replica_rate(m, lim, w)),
                f"min({conc} x {w.occupancy:.2f} in flight / one call's {w.call_s:.2f} s, "
                f"CPU limit / {w.cpu * 1000:.0f} ms)",
            )
            for what, w in (("upgrades", m.update), ("installs", m.install))
        ],
        "",
    ]
    for n in ns:
        p = plan(n, m, lim)
        out += [
            f"## N = {n:,}" + (" (measured: the model's check)" if n in MEASURED_NS else ""),
            "",
            "| | model | how |",
            "|---|---|---|",
            _row("replicas", f"**{p.replicas}**", f"ceil(N / {p.per_replica_max:,})"),
            _row("resources on the fullest replica", f"{p.per_replica:,}", "ceil(N / replicas)"),
            _row(
                "RSS per replica",
                f"{p.rss_mib:.0f} MiB (+{reserve:.0f} at start)",
                f"{m.rss_mib.intercept:.1f} + {m.rss_mib.slope * 1000:.1f} MiB per 1000",
            ),
            _row(
                "full update wave",
                f"**{_time(p.update.seconds)}**",
                f"N / min(replicas x {p.update.replica_rate:.2f}/s, write budget / writes per change): "
                + p.update.bound,
            ),
            _row("CPU per replica during the wave", f"{p.update.cpu:.2f} cores", "pace x CPU per upgrade"),
            _row(
                "API writes/s the wave asks for",
                f"{_f(p.update.writes_rps, 0)} (budget {_f(lim.api_write_rps, 0)})",
                f"replicas x pace x {lim.writes_per_change} writes per change (estimated)",
            ),
            _row(
                "all N installed at once",
                _time(p.install.seconds),
                f"as the wave, {p.install.replica_rate:.2f} installs/s per replica: {p.install.bound}",
            ),
            _row(
                "idle API requests/s, fleet",
                f"{p.idle_rps:.2f}",
                f"replicas x {m.idle_rps.intercept:.2f} + N x {m.idle_rps.slope * 1000:.3f}/1000",
            ),
            _row(
                "idle resyncs/s, fleet",
                f"{_f(p.resyncs_per_s, 0)} (no API request, no helm)",
                f"N / {m.reconcile_period_s:.0f} s, decided from memory",
            ),
            _row("idle CPU per replica", f"{p.idle_cpu_cores * 100:.2f} % of a core", "fitted, second half"),
            _row("restart until every resource is handled", _time(p.restart_s), "per replica, in parallel"),
            _row(
                "objects cached per replica",
                f"{_f(p.cached_objects, 0)}",
                f"{m.cached_per_resource:.0f} dependents + the resource + {history} revisions' metadata",
            ),
            _row(
                "release Secrets (etcd, API server watch cache)",
                f"{p.release_secrets:,}, {p.secret_bytes / MiB:,.0f} MiB",
                f"N x historyMax {history} x {RELEASE_DATA_BYTES:,} B",
            ),
            _row(
                "etcd, at least",
                f"{p.etcd_bytes / MiB:,.0f} MiB = {p.etcd_share * 100:.0f} % of the "
                f"{lim.etcd_quota_bytes / GiB:g} GiB quota",
                f"+ N x {MANIFEST_BYTES:,} B rendered objects; no metadata, MVCC history or fragmentation",
            ),
            "",
        ]
    out += _check(m, lim)
    out += _limit_section(limit, lim, m)
    out += _inputs(m, history)
    out += _unknowns(m)
    return "\n".join(out) + "\n"


def _check(m: Measured, lim: Limits) -> list[str]:
    out = [
        "## Check: the model at the measured N against the measurements",
        "",
        "One replica at each measured N (the benchmark ran one). The waves at N = 1000 are exact by "
        "construction (their helm call times come from those waves); the others are predictions.",
        "",
        "| N | RSS MiB model / measured | update wave s model / measured "
        "| install wave s model / measured | idle requests/s model / measured "
        "| restart s model / measured |",
        "|---|---|---|---|---|---|",
    ]
    bench = dataclasses.replace(lim, cpu_limit=math.inf)  # the benchmark set no CPU limit
    update, _ = replica_rate(m, bench, m.update)
    install, _ = replica_rate(m, bench, m.install)
    for (n, rss), (_, up), (_, inst), (_, rps), (_, restart) in zip(
        m.rss_points, m.update.points, m.install.points, m.idle_rps_points, m.restart_points, strict=True
    ):
        out.append(
            f"| {n} | {m.rss_mib.at(n):.0f} / {rss:.0f} | {n / update:.0f} / {up:.0f} | "
            f"{n / install:.0f} / {inst:.0f} | {m.idle_rps.at(n):.2f} / {rps:.2f} | "
            f"{m.restart_s.at(n):.1f} / {restart:.1f} |"
        )
    shard_fit = fit(m.shard_rss)
    out += [
        "",
        "At N = 100 and 500 the measured waves were faster per resource than the model says (the "
        "machine's two cores were less loaded); the model is pessimistic there, which is the safe side.",
        "",
        "Drift correction does not grow with N: its median was "
        + ", ".join(f"{v:.2f} s at N = {n}" for n, v in m.drift_p50_s)
        + " (from the dependent watches' caches, no helm); the model takes it as flat per replica, "
        "each replica watching only its own share.",
        "",
        "Sharding (sharding.md, N = 300 split over k = 1, 2, 3 instances on the same machine): per "
        "instance, "
        + "; ".join(
            f"k = {k}: cached objects {c:.2f}, CPU {u:.2f} of one instance's" for k, c, u in m.shard_shares
        )
        + f". RSS against resources per instance: {shard_fit.intercept:.1f} + "
        f"{shard_fit.slope * 1000:.1f} MiB per 1000 (the main runs: {m.rss_mib.intercept:.1f} + "
        f"{m.rss_mib.slope * 1000:.1f}), so a replica's RSS is a fixed part plus its share.",
        "",
    ]
    return out


def _limit_section(limit: ApiLimit, lim: Limits, m: Measured) -> list[str]:
    out = [
        "## Where the API server becomes the limit",
        "",
        "| criterion | from N | figure assumed | source |",
        "|---|---|---|---|",
        f"| update wave: the fleet's writes reach the write budget ({limit.wave_replicas:.1f} replicas "
        f"at full pace) | {limit.wave_n:,} | {lim.api_write_rps:.0f} writes/s = {MUTATING_INFLIGHT} "
        f"mutating requests in flight / the {MUTATING_P99_SLO_S:g} s p99 SLO; "
        f"{lim.writes_per_change} writes per change (estimated) | {INFLIGHT_SOURCE}; {SLO_SOURCE} |",
        f"| etcd: release history + objects fill the quota (default {ETCD_DEFAULT_QUOTA / GiB:g} GiB) "
        f"| {limit.etcd_n:,} | {limit.quota_bytes / GiB:g} GiB | {ETCD_SOURCE} |",
        f"| etcd: ... fill the suggested maximum | {limit.etcd_max_n:,} | "
        f"{ETCD_SUGGESTED_MAX / GiB:g} GiB | {ETCD_SOURCE} |",
    ]
    out += [
        f"| #{q} per {s} (the bench chart makes one per resource) | {n:,} | {t:,} | {THRESHOLD_SOURCE} |"
        for q, s, t, n in limit.thresholds
    ]
    out += [
        "",
        "Reading: past the write budget more replicas no longer shorten a wave; the wave then takes "
        "N x writes per change / budget, and every other client of the API server shares that budget "
        "(API Priority and Fairness puts service accounts' requests in one priority level). The "
        f"budget is a conservative reading of the defaults — {MUTATING_INFLIGHT} in flight at the "
        "SLO's latency; a healthy server answers writes in milliseconds and takes more — so "
        "`--api-write-rps` should be set to what the target cluster's `apiserver_request_total` shows "
        "it sustains. Idle, the fleet asks almost nothing (requests per replica, not per resource: "
        "resyncs are decided from memory), so the API server is a limit only for waves, for storage, "
        "and for the chart's own objects. Per-namespace thresholds apply to resources in one namespace.",
        "",
    ]
    return out


def _wave_inputs(m: Measured, change: str, scenario: str, w: Wave) -> list[str]:
    where = f"{scenario} at N = {REF_N}"
    return [
        _row(f"operator CPU per {change}", f"{w.operator_cpu * 1000:.1f} ms", f"{where}: operator CPU / N"),
        _row(f"helm CPU per {change}", f"{w.helm_cpu * 1000:.1f} ms", f"{where}: (tree - operator) CPU / N"),
        _row(f"helm processes per {change}", f"{w.helm_calls:.2f}", f"{where}: install/upgrade calls / N"),
        _row(
            f"one helm {change} in flight",
            f"{w.call_s:.2f} s",
            f"{where}: {w.seconds:.1f} s x {w.occupancy * m.concurrency:.2f} in flight on average / N "
            f"(C = {m.concurrency}, on 2 cores shared with the control plane)",
        ),
    ]


def _inputs(m: Measured, history: int) -> list[str]:
    pts = ", ".join
    return [
        "## Inputs, each from a committed measurement",
        "",
        "| input | value | from |",
        "|---|---|---|",
        _row(
            "RSS per replica (steady)",
            f"{m.rss_mib.intercept:.1f} MiB + {m.rss_mib.slope * 1000:.1f} MiB per 1000 resources",
            "least squares over " + pts(f"N={n}: {v:.0f}" for n, v in m.rss_points),
        ),
        *_wave_inputs(m, "upgrade", "update wave", m.update),
        *_wave_inputs(m, "install", "convergence wave", m.install),
        _row(
            "idle CPU",
            f"{m.idle_cpu_cores.intercept * 100:.3f} % + "
            f"{m.idle_cpu_cores.slope * 1000 * 100:.3f} % of a core per 1000",
            "second half of the idle window: " + pts(f"N={n}: {v * 100:.2f} %" for n, v in m.idle_cpu_points),
        ),
        _row(
            "CPU per idle resync",
            f"{m.idle_cpu_cores.slope * m.reconcile_period_s * 1000:.2f} ms",
            f"idle CPU per resource x the {m.reconcile_period_s:.0f} s resync period (no request, no helm)",
        ),
        _row(
            "idle API requests",
            f"{m.idle_rps.intercept:.2f}/s per replica + {m.idle_rps.slope * 1000:.3f}/s per 1000",
            "second half, net of the floor's: " + pts(f"N={n}: {v:.2f}/s" for n, v in m.idle_rps_points),
        ),
        _row(
            f"... of which, at N = {REF_N}",
            pts(f"{what} {rate:.2f}/s" for what, rate in m.idle_requests_by if rate >= 0.05),
            "by verb and resource (>= 0.05/s; the rest is background noise): a watch reconnect per "
            "dependent kind and a listing of namespaces, each about every 10 s; none per resource",
        ),
        _row(
            "API requests per change",
            f"{sum(WRITES_PER_CHANGE.values())} writes, {READS_PER_CHANGE} reads",
            "**estimated, not measured** (see below)",
        ),
        _row(
            "restart until every resource is handled",
            f"{m.restart_s.intercept:.1f} s + {m.restart_s.slope * 1000:.1f} s per 1000",
            pts(f"N={n}: {v:.1f} s" for n, v in m.restart_points),
        ),
        _row(
            "objects cached per resource",
            f"{m.cached_per_resource:.0f} dependents + the resource + {history} revisions (metadata only)",
            "sharding.md (dependent-watch caches: 900 for 300); the release index keeps Secrets' metadata",
        ),
        _row(
            "release Secret payload",
            f"{RELEASE_DATA_BYTES:,} B per revision, historyMax {history}",
            f"`{RELEASE_MEASURE_COMMAND}`; historyMax: Watch's default",
        ),
        _row("rendered objects", f"{MANIFEST_BYTES:,} B per resource", "the same dry-run's manifest"),
        _row("resync period", f"{m.reconcile_period_s:.0f} s", "Watch's default reconcilePeriod"),
        "",
        "Files: " + "; ".join(f"{k}: {v}" for k, v in m.sources.items()) + ".",
        "",
    ]


def _unknowns(m: Measured) -> list[str]:
    writes = "; ".join(f"{what}: {n}" for what, n in WRITES_PER_CHANGE.items())
    return [
        "## What the model does not know",
        "",
        "- **It is extrapolated from one 2-core machine** running the operator, helm, the API server, "
        "etcd and KWOK together, at N ≤ 1000. Nothing was run at 10k or more; a straight line through "
        "three points is assumed to hold a hundred times further.",
        "- **The helm call time** (one upgrade in flight) was measured with the control plane on the "
        "same two cores. On a replica with a core of its own and a remote API server it is likely "
        "shorter and network latency enters; the wave times scale with it.",
        f"- **API requests per change were not measured** (the request counter has no client label "
        f"and the local audit log records lists and watches only). The count is from the code path: "
        f"{writes}. Installs are assumed to write as many. Wrong by 2x, the wave's API limit moves "
        "by 2x.",
        "- **The API server's capacity** is not a published number: the write budget is the default "
        "in-flight limit read at the latency SLO, a conservative stand-in for measuring the cluster. "
        "Its watch-cache memory is at least the objects' stored bytes; its in-memory size per object "
        "was not measured.",
        "- **etcd sizes are floors**: release Secrets' payloads and the rendered manifests only, not "
        "object metadata, managedFields, status, the Pods and ReplicaSets the Deployments make, MVCC "
        "revisions kept until compaction, or the database's fragmentation. Every upgrade rewrites a "
        "resource's newest revisions, so a wave also adds uncompacted history until the next compaction.",
        "- **Each release's history is assumed full** (historyMax revisions per resource); the "
        "benchmark measured RSS with two. The release index keeps only metadata per revision, so "
        "the RSS line should hold, but that was not measured.",
        "- **Only this chart.** Bigger charts mean bigger release Secrets (the whole chart is stored in "
        "every revision), more dependents per resource and more writes per change.",
        "- **Replicas are static shards of equal size**; sharding.md shows the split (cached objects "
        "and CPU 1/k per instance) on one machine, where the wall time could not fall as 1/k. A shard "
        "that fails is not rebalanced in this model; the dynamic sharder's own cost is not counted.",
        f"- **Start-up**: the reserve is the peak measured with 500 unrelated CRDs "
        f"({m.start_peak_mib:.0f} MiB above steady); a cluster with more CRDs, or a replica listing many "
        "more resources at once, may peak higher. Day-2 schedules (a Job per run per resource) and "
        "drift corrections are not in the wave or idle figures.",
    ]


# -- command line ----------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--n", type=int, action="append", help="resources (repeatable; default 1k, 10k, 50k, 100k)"
    )
    p.add_argument("--rss-limit-mib", type=float, default=Limits.rss_limit_mib)
    p.add_argument("--cpu-limit", type=float, default=Limits.cpu_limit, help="cores per replica")
    p.add_argument("--reserve-mib", type=float, help="RSS kept free for the start-up peak")
    p.add_argument("--helm-concurrency", type=int, help="helm processes per replica")
    p.add_argument("--history-max", type=int, help="release revisions kept per resource")
    p.add_argument("--api-write-rps", type=float, default=Limits.api_write_rps)
    p.add_argument("--writes-per-change", type=int, default=Limits.writes_per_change)
    p.add_argument("--etcd-quota-gib", type=float, default=ETCD_DEFAULT_QUOTA / GiB)
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--write", action="store_true", help="write the report to --out instead of printing it")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    lim = Limits(
        rss_limit_mib=args.rss_limit_mib,
        cpu_limit=args.cpu_limit,
        reserve_mib=args.reserve_mib,
        concurrency=args.helm_concurrency,
        history_max=args.history_max,
        api_write_rps=args.api_write_rps,
        writes_per_change=args.writes_per_change,
        etcd_quota_bytes=int(args.etcd_quota_gib * GiB),
    )
    command = "python -m bench.capacity " + " ".join(argv if argv is not None else sys.argv[1:])
    try:
        text = render(load(args.results), lim, tuple(args.n or DEFAULT_NS), command.strip())
    except (OSError, ValueError, KeyError) as exc:
        print(f"capacity: {exc}", file=sys.stderr)
        return 2
    if args.write:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
