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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench import runtime_env, workload
from bench.cluster import BenchCluster
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
    shard: str, ns: str, watches: Path, workdir: Path, cluster: BenchCluster, python: str, helm: Path
) -> Instance:
    port = free_port()
    cmd = [
        python, "-m", "helm_operator.cli", "run", "--watches-file", str(watches),
        "--kubeconfig", str(cluster.kubeconfig), "--helm", str(helm),
        "--max-helm-processes", str(CONCURRENCY), "--namespace", ns, "--shard", shard,
        "--metrics-bind-address", f"127.0.0.1:{port}",
    ]  # fmt: skip
    env = {**os.environ, **helm_homes(workdir), "PYTHONPATH": str(REPO_ROOT)}
    log = (workdir / f"operator-{shard}.log").open("wb")
    proc = subprocess.Popen(
        cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    return Instance(shard, proc, port)


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
    watches = workdir / "watches.yaml"
    entry = {
        "group": workload.group(CONTENDER), "version": workload.VERSION, "kind": workload.KIND,
        "chart": str(workload.CHART), "maxConcurrentReconciles": CONCURRENCY, "wait": False,
    }  # fmt: skip
    watches.write_text(yaml.safe_dump([entry], sort_keys=False))
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
        settled = [(rss_mib(i.proc.pid), own_cpu_seconds(i.proc.pid), i.cached()) for i in instances]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(update, names))
        time.sleep(3)  # the new generation observed before counting it Ready
        wave = until_ready(cluster, ns, n, timeout=60 * 30)
        cpu_after = [own_cpu_seconds(i.proc.pid) for i in instances]
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
    per = [
        {
            "shard": inst.shard,
            "rss_mib": rss[0],
            "peak_mib": rss[1],
            "cpu_s": cpu_after[j],
            "cpu_install_s": cpu,
            "cached": cached,
        }
        for j, (inst, (rss, cpu, cached)) in enumerate(zip(instances, settled, strict=True))
    ]
    return {"k": k, "n": n, "converge_s": converge, "wave_s": wave, "instances": per}


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
        "| k | N | converge s | update wave s | instance | RSS MiB | peak MiB | CPU s | cached objects |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for j, i in enumerate(r["instances"]):
            head = (
                f"| {r['k']} | {r['n']} | {r['converge_s']:.1f} | {r['wave_s']:.1f}" if j == 0 else "| | | |"
            )
            lines.append(
                f"{head} | {i['shard']} | {i['rss_mib']:.1f} | {i['peak_mib']:.1f} | {i['cpu_s']:.1f} | "
                f"{i['cached']:.0f} |"
            )
    base = next((r for r in results if r["k"] == 1), None)
    if base:
        lines += ["", "Per instance, as a share of one instance's (k = 1):", ""]
        b = base["instances"][0]
        for r in results:
            if r["k"] == 1:
                continue
            rss = sum(i["rss_mib"] for i in r["instances"]) / r["k"] / b["rss_mib"]
            cached = sum(i["cached"] for i in r["instances"]) / r["k"] / max(b["cached"], 1)
            lines.append(
                f"- k = {r['k']}: cached objects {cached:.2f} (1/k = {1 / r['k']:.2f}), RSS {rss:.2f} "
                "(the interpreter and libraries are a fixed part of it)"
            )
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
    cluster = BenchCluster.open(args.kubeconfig, tools, pods=args.n)
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
