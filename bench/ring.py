"""Dynamic shards in numbers: the same N resources served by a ControllerRing of k = 1, 2, 3
instances (``run --controller-ring``, a shard Lease each) with the real controller-sharding sharder
assigning them; one fresh namespace and ring per k.

For each k, as ``bench.sharding`` measures static shards: the time until every resource is Ready,
an update wave, and per instance its RSS, the CPU of the operator process alone and the objects its
dependent watches cache; then API requests per resource per minute while idle (the API server's
count from a reconcile period after the wave on, less its rate before any instance started, with
the sharder running: the background). For the largest k, three moves:

* one instance killed (SIGKILL: its Lease is left to expire) and every resource it served changed
  at once: the time until the sharder has assigned them to the others, and until each is Ready at
  its new generation;
* one instance added and every resource changed at once: the time until the new instance holds its
  share and every change is Ready;
* one instance stopped with SIGTERM (it releases its Lease, as in a rolling update) and every
  resource it served changed at once: timed as the kill.

Across the moves, a release with more new revisions than the changes made to it was worked on
twice (target 0); one with fewer lost a change. ``python -m bench.ring [--n 300] [--shards 1,2,3]
[--lease 6] [--idle 60] [--settle 75] [--kubeconfig K] [--out F]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import runtime_env, workload
from bench.cluster import BenchCluster, ClusterTooSmall
from bench.contenders import free_port
from bench.measure import own_cpu_seconds, rss_mib
from bench.sharding import (
    CONCURRENCY,
    CONTENDER,
    INSTANCE_COLUMNS,
    RUN_COLUMNS,
    Instance,
    against_one,
    mean_rss,
    per_instance,
    start,
    table,
    until_ready,
    write_watches,
)
from helm_operator.config.sharding import Ring
from helm_operator.dev.sharder import Sharder
from helm_operator.dev.tools import REPO_ROOT, Toolchain

POLL = 0.5  # seconds between looks while a move is timed


def lease_flags(lease: int) -> list[str]:
    """The shard Lease's timing: renewed every second, given up after two thirds of its duration."""
    return [
        "--leader-election-lease-duration", str(lease),
        "--leader-election-renew-deadline", str(max(2, lease * 2 // 3)),
        "--leader-election-retry-period", "1",
    ]  # fmt: skip


def ring_resources() -> list[dict[str, Any]]:
    """The bench's kind and what its chart creates, as the ControllerRing names them."""
    controlled = [
        {"group": "apps", "resource": "deployments"},
        {"group": "", "resource": "services"},
        {"group": "", "resource": "configmaps"},
    ]
    return [
        {"group": workload.group(CONTENDER), "resource": workload.PLURAL, "controlledResources": controlled}
    ]


class Fleet:
    """The resources of one namespace and the ring instances serving them."""

    def __init__(
        self, cluster: BenchCluster, ns: str, ring: str, lease: int, start_one: Callable[..., Instance]
    ):
        self.cluster, self.ns, self.ring, self.lease = cluster, ns, ring, lease
        self.label = Ring(ring, "x").shard_label
        self._start = start_one
        self.instances: dict[str, Instance] = {}

    def add(self, name: str) -> Instance:
        selection = [
            "--controller-ring",
            self.ring,
            "--shard-name",
            name,
            "--leader-election-namespace",
            self.ns,
        ]
        self.instances[name] = self._start(name, [*selection, *lease_flags(self.lease)])
        return self.instances[name]

    def kill(self, name: str) -> None:
        inst = self.instances.pop(name)
        os.killpg(inst.proc.pid, signal.SIGKILL)
        inst.proc.wait(30)

    def stop(self) -> None:
        for inst in self.instances.values():
            inst.proc.send_signal(signal.SIGTERM)
        for inst in self.instances.values():
            try:
                inst.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(inst.proc.pid, signal.SIGKILL)

    def items(self) -> list[dict[str, Any]]:
        listing = self.cluster.custom.list_namespaced_custom_object(
            workload.group(CONTENDER), workload.VERSION, self.ns, workload.PLURAL
        )
        return list(listing.get("items") or [])

    def assignment(self) -> dict[str, str | None]:
        """Resource name -> the shard the sharder assigned it to (None: none now)."""
        return {
            i["metadata"]["name"]: (i["metadata"].get("labels") or {}).get(self.label) for i in self.items()
        }

    def ready(self, names: Iterable[str]) -> bool:
        """Every one of ``names`` Ready at its current generation."""
        wanted = set(names)
        done = {i["metadata"]["name"] for i in self.items() if workload.ours_reports_ready(i)}
        return wanted <= done

    def holders(self) -> dict[str, str]:
        """The ring's Leases in the namespace: name -> holderIdentity."""
        out = self.cluster.kubectl(
            "get", "leases", "-n", self.ns, "-l", f"{Ring.LEASE_LABEL}={self.ring}", "-o", "json"
        )
        return {
            i["metadata"]["name"]: i["spec"].get("holderIdentity") or ""
            for i in json.loads(out.stdout)["items"]
        }

    def change(self, names: Iterable[str], wave: int) -> None:
        custom, group = self.cluster.custom, workload.group(CONTENDER)

        def patch(name: str) -> None:
            body = {"spec": workload.values(wave)}
            custom.patch_namespaced_custom_object(
                group, workload.VERSION, self.ns, workload.PLURAL, name, body
            )

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(patch, names))

    def revisions(self) -> dict[str, int]:
        return workload.latest_revision(self.cluster.release_records(self.ns))


def until(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until ``check`` holds (looked at every ``POLL`` s)."""
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout:
            raise RuntimeError(f"not within {timeout:.0f}s: {what}")
        time.sleep(POLL)
    return time.monotonic() - began


def twice_or_lost(
    before: dict[str, int], after: dict[str, int], changed: Iterable[str]
) -> tuple[list[str], list[str]]:
    """Releases with more new revisions than changes made to them (work done twice), and changed
    ones with fewer (a change lost). Pure."""
    expected = Counter(changed)
    twice = sorted(n for n in after if after[n] - before.get(n, 0) > expected[n])
    lost = sorted(n for n in expected if after.get(n, 0) - before.get(n, 0) < expected[n])
    return twice, lost


def leave(fleet: Fleet, graceful: bool, wave: int, timeout: float) -> dict[str, Any]:
    """The instance serving most resources leaves (SIGTERM, or SIGKILL: its Lease left to expire)
    and every resource it served is changed at once: the times until the sharder has assigned them
    to the others and until each is Ready at its new generation."""
    assigned = fleet.assignment()
    victim = Counter(s for s in assigned.values() if s).most_common(1)[0][0]
    orphans = sorted(n for n, s in assigned.items() if s == victim)
    before = fleet.revisions()
    if graceful:
        fleet.instances[victim].proc.send_signal(signal.SIGTERM)
    else:
        fleet.kill(victim)
    left = time.monotonic()
    fleet.change(orphans, wave)
    changed = time.monotonic() - left
    reassigned = until(
        lambda: all(fleet.assignment().get(n) not in (None, victim) for n in orphans), timeout, "reassigned"
    )
    served = until(lambda: fleet.ready(orphans), timeout, "the leaving shard's resources Ready")
    served_total = time.monotonic() - left
    if graceful:
        fleet.instances.pop(victim).proc.wait(60)
    twice, lost = twice_or_lost(before, fleet.revisions(), orphans)
    return {
        "victim": victim,
        "orphans": len(orphans),
        "change_written_s": changed,
        "reassigned_s": reassigned,
        "served_again_s": served_total,
        "served_after_reassigned_s": served,
        "twice": twice,
        "lost": lost,
    }


def join(fleet: Fleet, names: list[str], wave: int, timeout: float) -> dict[str, Any]:
    """An instance added, and every resource changed once its Lease is held: the times until it
    holds its first resources and until every change is Ready."""
    newcomer = f"s{len(fleet.instances) + 1}"  # after one left: the k-th name, unused so far
    before = fleet.revisions()
    fleet.add(newcomer)
    added = time.monotonic()
    until(lambda: fleet.holders().get(newcomer) == newcomer, timeout, "the new shard's Lease")
    joined = time.monotonic() - added
    fleet.change(names, wave)
    until(lambda: newcomer in fleet.assignment().values(), timeout, "resources assigned to the new shard")
    holds = time.monotonic() - added
    settled = until(
        lambda: all(fleet.assignment().get(n) for n in names) and fleet.ready(names),
        timeout,
        "every change Ready",
    )
    settled_total = time.monotonic() - added
    time.sleep(3)  # a late (wrong) second action would show
    twice, lost = twice_or_lost(before, fleet.revisions(), names)
    return {
        "newcomer": newcomer,
        "lease_held_s": joined,
        "share": sum(1 for s in fleet.assignment().values() if s == newcomer),
        "holds_s": holds,
        "wave_s": settled_total,
        "wave_after_holds_s": settled,
        "twice": twice,
        "lost": lost,
    }


def moves(fleet: Fleet, names: list[str], timeout: float) -> dict[str, Any]:
    """A shard killed, one added, one stopped (as a rolling update stops it): each with changes."""
    killed = leave(fleet, graceful=False, wave=3, timeout=timeout)
    added = join(fleet, names, wave=4, timeout=timeout)
    stopped = leave(fleet, graceful=True, wave=5, timeout=timeout)
    return {"lease_s": fleet.lease, "killed": killed, "added": added, "stopped": stopped}


def one(
    k: int, n: int, idle: float, settle: float, background: float, lease: int, with_moves: bool,
    cluster: BenchCluster, sharder: Sharder,
    python: str, helm: Path, root: Path,
) -> dict[str, Any]:  # fmt: skip
    ns = f"ring-{k}-{int(time.time())}"
    ring = f"bench-{os.urandom(3).hex()}"  # the sharder knows shards by Lease name alone: a ring per run
    cluster.create_namespace(ns)
    sharder.apply_ring(ring, ring_resources(), namespace=ns)
    workdir = root / ns
    workdir.mkdir(parents=True)
    watches = write_watches(workdir)

    def start_one(name: str, selection: list[str]) -> Instance:
        return start(name, ns, watches, workdir, cluster, python, helm, selection)

    fleet = Fleet(cluster, ns, ring, lease, start_one)
    names = workload.release_names(n)
    custom, group = cluster.custom, workload.group(CONTENDER)

    def create(name: str) -> None:
        body = workload.custom_resource(CONTENDER, name, 1)
        custom.create_namespaced_custom_object(group, workload.VERSION, ns, workload.PLURAL, body)

    result: dict[str, Any] = {"k": k, "n": n, "ring": ring}
    try:
        shards = [f"s{i}" for i in range(k)]
        for s in shards:
            fleet.add(s)
        until(lambda: fleet.holders() == {s: s for s in shards}, 120, "every shard's Lease held")
        time.sleep(2)  # the sharder has seen the Leases: every resource is assigned as it is created
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, names))
        result["converge_s"] = until_ready(cluster, ns, n, timeout=60 * 30)
        time.sleep(10)
        settled = {
            s: (rss_mib(i.proc.pid), own_cpu_seconds(i.proc.pid), i.cached())
            for s, i in fleet.instances.items()
        }
        fleet.change(names, 2)
        time.sleep(3)  # the new generation observed before counting it Ready
        result["wave_s"] = until_ready(cluster, ns, n, timeout=60 * 30)
        cpu_after = {s: own_cpu_seconds(i.proc.pid) for s, i in fleet.instances.items()}
        shares = Counter(s for s in fleet.assignment().values() if s)
        time.sleep(settle)  # each release's first resync after a Helm action compares its objects
        requests = cluster.requests()
        time.sleep(idle)
        by_kind = cluster.requests()
        grown = {k: v - requests.get(k, 0.0) for k, v in by_kind.items() if v > requests.get(k, 0.0)}
        result["idle_requests_top"] = dict(sorted(grown.items(), key=lambda kv: -kv[1])[:8])
        per_min = sum(grown.values()) / (idle / 60)
        result["idle_requests_per_min"] = per_min
        result["idle_requests_per_resource_min"] = (per_min - background) / n
        result["instances"] = per_instance(settled, cpu_after, shares)
        if with_moves:
            result["moves"] = moves(fleet, names, timeout=600)
    finally:
        fleet.stop()
        cluster.strip_finalizers(group, workload.VERSION, workload.PLURAL, ns)
        cluster.delete_namespace(ns)
        cluster.kubectl("delete", "controllerring", ring, "--ignore-not-found")
    return result


def report(results: list[dict[str, Any]], machine: str, background: float, settle: float) -> str:
    lines = [
        "# Dynamic shards: a ControllerRing of k instances serving the same N resources",
        "",
        f"{machine}. `python -m bench.ring`: one local control plane (KWOK nodes), the real "
        "controller-sharding sharder (its webhook on loopback) assigning the resources, the podinfo "
        f"chart, {CONCURRENCY} helm processes and reconciles per instance; one fresh namespace and "
        "ControllerRing per k. RSS after convergence (and peak), CPU of the operator process alone "
        "(helm excluded) over install and one update wave, objects in its dependent-watch caches, "
        "resources the sharder assigned it. Idle requests: the API server's count over a minute "
        f"that begins {settle:.0f} s after the update wave (each release's first resync after a Helm action "
        f"compares its objects once), less the {background:.0f} requests a minute it served before any "
        "instance started (the sharder, the cluster's controllers, KWOK's nodes); the shard Leases "
        "renewed every second are most of what is left.",
        "",
        *table(
            results,
            [*RUN_COLUMNS, ("idle req/resource/min", lambda r: f"{r['idle_requests_per_resource_min']:.2f}")],
            [INSTANCE_COLUMNS[0], ("resources", lambda i: f"{i['share']}"), *INSTANCE_COLUMNS[1:]],
        ),
    ]

    def describe(r: dict[str, Any], one: dict[str, Any]) -> str:
        cached = [i["cached"] / max(one["cached"], 1) for i in r["instances"]]
        each = [i["cached"] / max(i["share"], 1) for i in r["instances"]]
        return (
            f"- k = {r['k']}: cached objects {min(cached):.2f} to {max(cached):.2f} of one instance's "
            f"(1/k = {1 / r['k']:.2f}: the sharder's hash ring decides the shares), "
            f"{min(each):.2f} to {max(each):.2f} per resource served; RSS {mean_rss(r, one):.2f}"
        )

    lines += against_one(results, describe)
    for r in results:
        m = r.get("moves")
        if not m:
            continue
        killed, added, stopped = m["killed"], m["added"], m["stopped"]
        lines += [
            "",
            f"## Moves at k = {r['k']}, N = {r['n']} "
            f"(shard Leases of {m['lease_s']} s, renewed every second)",
            "",
            f"- **A shard killed** ({_leaving(killed)}",
            f"- **A shard added** ({added['newcomer']}; its Lease held {added['lease_held_s']:.1f} s after "
            f"the process started, every resource changed then): it held its first resources "
            f"{added['holds_s']:.1f} s after the start and {added['share']} in the end; every change "
            f"Ready {added['wave_s']:.1f} s after the start.",
            f"- **A shard stopped** with SIGTERM, as a rolling update stops it ({_leaving(stopped)}",
            "- **Work done twice** (a release with more new revisions than changes made to it): "
            + _names([*killed["twice"], *added["twice"], *stopped["twice"]])
            + "; **changes lost**: "
            + _names([*killed["lost"], *added["lost"], *stopped["lost"]])
            + ".",
        ]
    return "\n".join(lines) + "\n"


def _leaving(m: dict[str, Any]) -> str:
    return (
        f"{m['victim']}, {m['orphans']} resources, each changed at once; the writes took "
        f"{m['change_written_s']:.1f} s): assigned to the others {m['reassigned_s']:.1f} s after it "
        f"left, all Ready at their new generation {m['served_again_s']:.1f} s after it "
        f"({m['served_after_reassigned_s']:.1f} s after the reassignment)."
    )


def _names(names: list[str]) -> str:
    return f"{len(names)}" + (f" ({', '.join(names[:10])})" if names else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ring", description=__doc__)
    p.add_argument("--n", type=int, default=300)
    p.add_argument(
        "--shards", default="1,2,3", help="ring sizes to run, comma-separated (moves at the largest)"
    )
    p.add_argument("--lease", type=int, default=6, help="seconds: the shard Leases' duration")
    p.add_argument("--idle", type=float, default=60.0, help="seconds of idle request counting per k")
    p.add_argument(
        "--settle",
        type=float,
        default=75.0,
        help="seconds between the update wave and the idle count (a reconcile period and then some: the "
        "first resync after a Helm action reads the release's objects once)",
    )
    p.add_argument("--kubeconfig", type=Path, default=None, help="a running cluster (default: start one)")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "bench/results/ring.md")
    args = p.parse_args(argv)
    tools = Toolchain.discover()
    tools.require("helm", "sharder", "kubectl")
    python = runtime_env.python(lambda line: print(line, file=sys.stderr))
    try:
        cluster = BenchCluster.open(args.kubeconfig, tools, pods=args.n)
    except ClusterTooSmall as exc:
        print(f"python -m bench.ring: {exc}", file=sys.stderr)
        return 2
    root = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-ring-{os.getpid()}"
    sizes = [int(x) for x in args.shards.split(",")]
    results = []
    sharder = Sharder(root / "sharder", cluster.kubeconfig, tools, free_port())
    (root / "sharder").mkdir(parents=True)
    try:
        cluster.apply_crd(workload.crd(CONTENDER))
        sharder.start()
        began = cluster.request_total()
        time.sleep(args.idle)
        background = (cluster.request_total() - began) / (args.idle / 60)
        print(f"background: {background:.0f} requests/min", file=sys.stderr, flush=True)
        for k in sizes:
            print(f"k = {k}: {args.n} resources ...", file=sys.stderr, flush=True)
            results.append(
                one(k, args.n, args.idle, args.settle, background, args.lease, k == max(sizes) and k > 1,
                    cluster, sharder, python,
                    tools.helm, root)
            )  # fmt: skip
            print(f"  {results[-1]}", file=sys.stderr, flush=True)
    finally:
        sharder.stop()
        cluster.close()
    machine = (
        f"{os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 2**30} GiB"
    )
    args.out.write_text(report(results, machine, background, args.settle))
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
