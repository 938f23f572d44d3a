"""Static shards side by side: the same N resources served by k = 1, 2, 3 instances of the operator
(``run --shard s<i>``, the resources labelled round-robin), one fresh namespace per k.

For each k: the time until every resource is Ready, then the time of an update wave (every spec
changed), and per instance its RSS and peak RSS, the CPU seconds of the operator process alone
(helm excluded), and how many objects its dependent watches cache — what sharding is meant to
divide by k. ``python -m bench.sharding [--n 300] [--shards 1,2,3] [--kubeconfig K] [--out F]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench import runtime_env, workload
from bench.cluster import BenchCluster, ClusterTooSmall
from bench.contenders import free_port, helm_homes
from bench.measure import own_cpu_seconds, rss_mib
from helm_operator.config.sharding import SHARD_LABEL
from helm_operator.dev.tools import REPO_ROOT, Toolchain

CONTENDER = "ours"
CONCURRENCY = 4  # helm processes and reconciles per instance, as the main benchmark runs ours


@dataclass
class Instance:
    shard: str
    proc: subprocess.Popen[bytes]
    metrics_port: int

    def cached(self) -> float:
        """Objects in the instance's dependent-watch caches (its metrics)."""
        text = (
            urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        )
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("helm_operator_dependent_cache_objects{")
        )


def start(
    shard: str,
    ns: str,
    watches: Path,
    workdir: Path,
    cluster: BenchCluster,
    python: str,
    helm: Path,
    selection: list[str] | None = None,
) -> Instance:
    """One instance; ``selection``: the flags that make it a shard (default ``--shard SHARD``)."""
    port = free_port()
    cmd = [
        python, "-m", "helm_operator.cli", "run", "--watches-file", str(watches),
        "--kubeconfig", str(cluster.kubeconfig), "--helm", str(helm),
        "--max-helm-processes", str(CONCURRENCY), "--namespace", ns,
        *(["--shard", shard] if selection is None else selection),
        "--metrics-bind-address", f"127.0.0.1:{port}",
    ]  # fmt: skip
    env = {**os.environ, **helm_homes(workdir), "PYTHONPATH": str(REPO_ROOT)}
    log = (workdir / f"operator-{shard}.log").open("wb")
    proc = subprocess.Popen(
        cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    return Instance(shard, proc, port)


def write_watches(workdir: Path) -> Path:
    """The one watches entry every instance of a run serves: the podinfo chart, no waiting."""
    watches = workdir / "watches.yaml"
    entry = {
        "group": workload.group(CONTENDER), "version": workload.VERSION, "kind": workload.KIND,
        "chart": str(workload.CHART), "maxConcurrentReconciles": CONCURRENCY, "wait": False,
    }  # fmt: skip
    watches.write_text(yaml.safe_dump([entry], sort_keys=False))
    return watches


Settled = tuple[tuple[float | None, float | None], float | None, float]  # (RSS, peak) MiB, CPU s, cached


def per_instance(
    settled: dict[str, Settled], cpu_after: dict[str, float | None], shares: dict[str, int] | None = None
) -> list[dict[str, Any]]:
    """Each instance's numbers: after convergence (``settled``) and after the update wave."""
    return [
        {
            "shard": shard,
            **({} if shares is None else {"share": shares.get(shard, 0)}),
            "rss_mib": rss[0],
            "peak_mib": rss[1],
            "cpu_install_s": cpu,
            "cpu_s": cpu_after[shard],
            "cached": cached,
        }
        for shard, (rss, cpu, cached) in settled.items()
    ]


def ready_count(cluster: BenchCluster, ns: str) -> int:
    listing = cluster.custom.list_namespaced_custom_object(
        workload.group(CONTENDER), workload.VERSION, ns, workload.PLURAL
    )
    return sum(1 for cr in listing.get("items") or [] if workload.ours_reports_ready(cr))


def until_ready(cluster: BenchCluster, ns: str, n: int, timeout: float) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if ready_count(cluster, ns) >= n:
            return time.monotonic() - began
        time.sleep(1.0)
    raise RuntimeError(f"{ns}: not every resource Ready within {timeout:.0f}s")


def one(k: int, n: int, cluster: BenchCluster, python: str, helm: Path, root: Path) -> dict[str, Any]:
    ns = f"shards-{k}-{int(time.time())}"
    cluster.create_namespace(ns)
    workdir = root / ns
    workdir.mkdir(parents=True)
    watches = write_watches(workdir)
    shards = [f"s{i}" for i in range(k)]
    instances = [start(s, ns, watches, workdir, cluster, python, helm) for s in shards]
    names = workload.release_names(n)
    custom, group = cluster.custom, workload.group(CONTENDER)

    def create(i: int) -> None:
        body = workload.custom_resource(CONTENDER, names[i], 1)
        body["metadata"]["labels"] = {SHARD_LABEL: shards[i % k]}
        custom.create_namespaced_custom_object(group, workload.VERSION, ns, workload.PLURAL, body)

    def update(name: str) -> None:
        patch = {"spec": workload.values(2)}
        custom.patch_namespaced_custom_object(group, workload.VERSION, ns, workload.PLURAL, name, patch)

    try:
        time.sleep(5)  # every instance listening
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(n)))
        converge = until_ready(cluster, ns, n, timeout=60 * 30)
        time.sleep(10)
        settled = {i.shard: (rss_mib(i.proc.pid), own_cpu_seconds(i.proc.pid), i.cached()) for i in instances}
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(update, names))
        time.sleep(3)  # the new generation observed before counting it Ready
        wave = until_ready(cluster, ns, n, timeout=60 * 30)
        cpu_after = {i.shard: own_cpu_seconds(i.proc.pid) for i in instances}
    finally:
        for i in instances:
            i.proc.send_signal(signal.SIGTERM)
        for i in instances:
            try:
                i.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(i.proc.pid, signal.SIGKILL)
        cluster.strip_finalizers(group, workload.VERSION, workload.PLURAL, ns)
        cluster.delete_namespace(ns)
    per = per_instance(settled, cpu_after)
    return {"k": k, "n": n, "converge_s": converge, "wave_s": wave, "instances": per}


Column = tuple[str, Callable[[dict[str, Any]], str]]  # a table's title and its cell from a result
RUN_COLUMNS: list[Column] = [
    ("k", lambda r: f"{r['k']}"),
    ("N", lambda r: f"{r['n']}"),
    ("converge s", lambda r: f"{r['converge_s']:.1f}"),
    ("update wave s", lambda r: f"{r['wave_s']:.1f}"),
]
INSTANCE_COLUMNS: list[Column] = [
    ("instance", lambda i: i["shard"]),
    ("RSS MiB", lambda i: f"{i['rss_mib']:.1f}"),
    ("peak MiB", lambda i: f"{i['peak_mib']:.1f}"),
    ("CPU s", lambda i: f"{i['cpu_s']:.1f}"),
    ("cached objects", lambda i: f"{i['cached']:.0f}"),
]


def table(results: list[dict[str, Any]], runs: list[Column], instances: list[Column]) -> list[str]:
    """One row per instance; a run's own cells only on its first."""
    titles = [t for t, _ in [*runs, *instances]]
    lines = ["| " + " | ".join(titles) + " |", "|" + "---|" * len(titles)]
    for r in results:
        for j, i in enumerate(r["instances"]):
            cells = [cell(r) if j == 0 else "" for _, cell in runs] + [cell(i) for _, cell in instances]
            lines.append("|" + "|".join(f" {c} " if c else " " for c in cells) + "|")
    return lines


def against_one(
    results: list[dict[str, Any]], describe: Callable[[dict[str, Any], dict[str, Any]], str]
) -> list[str]:
    """A line per run of k > 1, from the run and the one instance of k = 1 (none without that run)."""
    base = next((r for r in results if r["k"] == 1), None)
    if base is None:
        return []
    one = base["instances"][0]
    return [
        "",
        "Per instance, as a share of one instance's (k = 1):",
        "",
        *(describe(r, one) for r in results if r["k"] != 1),
    ]


def mean_rss(r: dict[str, Any], one: dict[str, Any]) -> float:
    """A run's mean RSS per instance as a share of one instance's."""
    return sum(i["rss_mib"] for i in r["instances"]) / r["k"] / one["rss_mib"]


def report(results: list[dict[str, Any]], machine: str) -> str:
    lines = [
        "# Static shards: k instances serving the same N resources",
        "",
        f"{machine}. `python -m bench.sharding`: one local control plane (KWOK nodes), the podinfo "
        f"chart, {CONCURRENCY} helm processes and reconciles per instance, resources labelled "
        f"`{SHARD_LABEL}=s<i>` round-robin; one fresh namespace per k. RSS after convergence (and "
        "peak), CPU of the operator process alone (helm excluded) over install and one update wave, "
        "objects in its dependent-watch caches.",
        "",
        *table(results, RUN_COLUMNS, INSTANCE_COLUMNS),
    ]

    def describe(r: dict[str, Any], one: dict[str, Any]) -> str:
        cached = sum(i["cached"] for i in r["instances"]) / r["k"] / max(one["cached"], 1)
        return (
            f"- k = {r['k']}: cached objects {cached:.2f} (1/k = {1 / r['k']:.2f}), "
            f"RSS {mean_rss(r, one):.2f} (the interpreter and libraries are a fixed part of it)"
        )

    lines += against_one(results, describe)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.sharding", description=__doc__)
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--shards", default="1,2,3", help="instance counts to run, comma-separated")
    p.add_argument("--kubeconfig", type=Path, default=None, help="a running cluster (default: start one)")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "bench/results/sharding.md")
    args = p.parse_args(argv)
    tools = Toolchain.discover()
    tools.require("helm")
    python = runtime_env.python(lambda line: print(line, file=sys.stderr))
    try:
        cluster = BenchCluster.open(args.kubeconfig, tools, pods=args.n)
    except ClusterTooSmall as exc:
        print(f"python -m bench.sharding: {exc}", file=sys.stderr)
        return 2
    root = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-sharding-{os.getpid()}"
    results = []
    try:
        cluster.apply_crd(workload.crd(CONTENDER))
        for k in (int(x) for x in args.shards.split(",")):
            print(f"k = {k}: {args.n} resources ...", file=sys.stderr, flush=True)
            results.append(one(k, args.n, cluster, python, tools.helm, root))
            print(f"  {results[-1]}", file=sys.stderr, flush=True)
    finally:
        cluster.close()
    machine = (
        f"{os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 2**30} GiB"
    )
    args.out.write_text(report(results, machine))
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
