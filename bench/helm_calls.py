"""What one ``helm upgrade --install`` costs as the operator runs it, against plain helm.

The convergence benchmark sees ours' helm processes use more CPU per release than ``helm-lean``
(plain helm with the flags and Go settings ours passes) and cannot say why: it runs them eight at
a time beside the operator, so a call's CPU there also carries the load the others make. Here one
call runs at a time, the three shapes interleaved call by call (load that drifts falls on all
alike), on the benchmark's chart, a fresh release each (install), then each upgraded once:

- ``helm-lean``: ``helm upgrade --install NAME CHART --namespace NS --values F
  --disable-openapi-validation`` with ``HELM_GO_ENV``, as the convergence benchmark runs it;
- ``ours, no post-renderer``: the operator's own adapter (``adapters/helm.Helm``) with no work
  folder: pyhelm3's command (a shell, values on stdin, ``--output json``, ``--history-max``,
  ``--reset-values``) and the release labels, but no wrapper and no post-render;
- ``ours``: the adapter as the operator runs it: the wrapper script that gives helm the
  post-renderer plugin, and the post-render served in this process (``postrender.Exchange``).

For each call: CPU of the helm process tree (helm, the shells, the plugin's script and its ``cat``
processes; from ``wait4`` for plain helm, from this process's reaped children for the adapter) and,
for the adapter, this process's own CPU across the call (the asyncio side, the post-render, the
JSON helm printed): what the operator process spends on the call besides helm.

``python -m bench.helm_calls [--n 30] [--kubeconfig K] [--out F]``
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench import workload
from bench.cluster import BenchCluster
from bench.contenders import helm_homes, helm_version
from helm_operator.adapters.helm import HELM_GO_ENV, Helm, HelmSettings
from helm_operator.config.charts import ChartRef
from helm_operator.core.naming import OWNER_LABEL, owner_id
from helm_operator.dev.tools import REPO_ROOT, Toolchain

LEAN, BARE, OURS = "helm-lean", "ours, no post-renderer", "ours"
SHAPES = (LEAN, BARE, OURS)
WAVES = {1: "install", 2: "upgrade"}
TIMEOUT_S = 300


@dataclass
class Sample:
    """One call: CPU seconds of its helm process tree, and of this process across it (None for
    plain helm, which this process only waits for)."""

    helm: float
    caller: float | None = None


@dataclass
class Tally:
    samples: dict[tuple[str, int], list[Sample]] = field(default_factory=dict)

    def add(self, shape: str, wave: int, sample: Sample) -> None:
        self.samples.setdefault((shape, wave), []).append(sample)


def _median_ms(values: Sequence[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")


def summary(tally: Tally) -> list[dict[str, object]]:
    """Per wave and shape: median CPU ms of the helm tree, of the caller, and the tree's ratio to
    plain helm's (pure: what the report prints)."""
    rows: list[dict[str, object]] = []
    for wave in WAVES:
        lean = _median_ms([s.helm for s in tally.samples.get((LEAN, wave), [])])
        for shape in SHAPES:
            got = tally.samples.get((shape, wave), [])
            if not got:
                continue
            helm = _median_ms([s.helm for s in got])
            callers = [s.caller for s in got if s.caller is not None]
            rows.append(
                {
                    "wave": WAVES[wave],
                    "shape": shape,
                    "n": len(got),
                    "helm_ms": helm,
                    "extra_ms": helm - lean,
                    "ratio": helm / lean if lean else float("nan"),
                    "caller_ms": _median_ms(callers) if callers else None,
                }
            )
    return rows


def report(rows: Sequence[Mapping[str, object]], machine: str, helm: str, n: int) -> str:
    lines = [
        "# One `helm upgrade --install`: as ours runs it, against plain helm",
        "",
        f"{machine}, helm {helm}. `python -m bench.helm_calls --n {n}`: one local control plane (KWOK "
        f"nodes), the benchmark's podinfo chart, {n} releases per shape, one call at a time, the "
        "shapes interleaved call by call; each release installed, then upgraded (one value changed). "
        "Medians. Helm tree: CPU of helm and every process it or its caller started for the call "
        "(shells, the post-renderer plugin's script); caller: the benchmark process's own CPU across "
        "the call when it runs helm through the operator's adapter (asyncio, pyhelm3, the post-render "
        "served in-process, the JSON helm printed). See the module's docstring for each shape.",
        "",
        "| call | shape | n | helm tree CPU ms | more than helm-lean ms | x helm-lean | caller CPU ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        caller = r["caller_ms"]
        lines.append(
            f"| {r['wave']} | {r['shape']} | {r['n']} | {r['helm_ms']:.1f} | {r['extra_ms']:+.1f} | "
            f"{r['ratio']:.2f}x | {'—' if caller is None else format(caller, '.1f')} |"
        )
    return "\n".join(lines) + "\n"


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Runner:
    def __init__(self, cluster: BenchCluster, tools: Toolchain, root: Path) -> None:
        self.cluster = cluster
        self.tools = tools
        self.root = root
        self.env = {**os.environ, **cluster.dev.env, **helm_homes(root), **HELM_GO_ENV}
        # The adapter's helm processes inherit this process's environment: the same homes, and
        # the Go settings the operator's wrapper gives them (the bare shape has no wrapper).
        os.environ.update({**helm_homes(root), **HELM_GO_ENV})
        chart_cache = root / "charts"
        settings = HelmSettings(str(tools.helm), cluster.kubeconfig, 1, chart_cache=chart_cache)
        self.bare = Helm(settings)
        self.ours = Helm(dataclasses.replace(settings, workdir=root / "work"))
        self.chart = ChartRef(str(workload.CHART), path=workload.CHART)

    def lean(self, name: str, namespace: str, wave: int) -> Sample:
        values = self.root / f"values-{wave}.yaml"
        if not values.exists():
            values.write_text(yaml.safe_dump(workload.values(wave)))
        args = [str(self.tools.helm), "upgrade", "--install", name, str(workload.CHART)]
        args += ["--namespace", namespace, "--values", str(values), "--disable-openapi-validation"]
        with (self.root / "helm-lean.log").open("ab") as out:
            proc = subprocess.Popen(args, env=self.env, stdout=out, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"helm upgrade {name} failed: see {self.root / 'helm-lean.log'}")
        return Sample(usage.ru_utime + usage.ru_stime)

    async def adapter(self, helm: Helm, name: str, namespace: str, wave: int) -> Sample:
        owner = owner_id(workload.group("ours"), workload.KIND, namespace, name)
        before_children, before_self = _children_cpu(), _self_cpu()
        await helm.install_or_upgrade(
            name,
            namespace,
            self.chart,
            workload.values(wave),
            labels={OWNER_LABEL: owner},
            timeout=TIMEOUT_S,
            wait=False,
            history_max=10,
            server_side=True,  # a release Helm 4 made: what ours passes for it
        )
        return Sample(_children_cpu() - before_children, _self_cpu() - before_self)

    async def run(self, n: int, say: Callable[[str], None]) -> Tally:
        tally = Tally()
        stamp = int(time.time())
        spaces = {shape: f"calls-{i}-{stamp}" for i, shape in enumerate(SHAPES)}
        for namespace in spaces.values():
            self.cluster.create_namespace(namespace)
        calls: dict[str, Callable[[str, str, int], Awaitable[Sample]]] = {
            LEAN: lambda name, ns, wave: asyncio.to_thread(self.lean, name, ns, wave),
            BARE: lambda name, ns, wave: self.adapter(self.bare, name, ns, wave),
            OURS: lambda name, ns, wave: self.adapter(self.ours, name, ns, wave),
        }
        # A first call of each adapter (ours lays out its post-renderer, asking helm's version) is
        # not counted. The bare adapter learns no version (it is learnt with that layout): told
        # ours', so it passes the same flags for a server-side release.
        await calls[OURS]("warm-up", spaces[OURS], 1)
        self.bare._major = self.ours._major
        await calls[BARE]("warm-up", spaces[BARE], 1)
        for wave in WAVES:
            for i, name in enumerate(workload.release_names(n)):
                for shape in SHAPES:
                    tally.add(shape, wave, await calls[shape](name, spaces[shape], wave))
                if (i + 1) % 10 == 0:
                    say(f"  {WAVES[wave]}: {i + 1}/{n}")
        for namespace in spaces.values():
            self.cluster.delete_namespace(namespace)
        return tally


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.helm_calls", description=__doc__)
    p.add_argument("--n", type=int, default=30, help="releases per shape")
    p.add_argument("--kubeconfig", type=Path, default=None, help="a running cluster (default: start one)")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "bench/results/helm-calls.md")
    args = p.parse_args(argv)
    tools = Toolchain.discover()
    tools.require("helm")
    cluster = BenchCluster.open(args.kubeconfig, tools, pods=(args.n + 1) * len(SHAPES))
    root = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-helm-calls-{os.getpid()}"
    root.mkdir(parents=True)
    try:
        runner = Runner(cluster, tools, root)
        tally = asyncio.run(runner.run(args.n, lambda line: print(line, file=sys.stderr)))
    finally:
        cluster.close()
    machine = (
        f"{os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 2**30} GiB"
    )
    args.out.write_text(report(summary(tally), machine, helm_version(tools.helm), args.n))
    print(args.out.read_text())
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
