"""Many CRDs the operator does not serve: its start-up, memory and API requests with 0 and with N
unrelated CustomResourceDefinitions installed.

A cluster with hundreds of CRDs (cloud providers' controllers, Crossplane) must not make an
operator that serves seven kinds start slower or hold more memory: every CRD it lists with its full
schema, and every group it discovers, is paid by each replica. One local control plane (KWOK
nodes), the repository's CRDs and ``watches.yaml``, a handful of sample CRs; the operator started
as the other benches start it (the runtime-only virtualenv), once before and once after N
generated CRDs (spread over ~50 API groups, each with a 10-30 KB openAPIV3Schema, some with
several versions) are applied. For each: seconds from process start to ``/readyz`` answering 200
and until every sample CR is Ready, RSS and peak RSS after settling, CPU seconds of the operator
process alone, and the list/watch requests it sent (from the API server's audit log, by user
agent). ``python -m bench.many_crds [--crds 500] [--kubeconfig K] [--out F]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from bench import runtime_env
from bench.cluster import BenchCluster
from bench.contenders import free_port, helm_homes
from bench.measure import own_cpu_seconds, rss_mib
from bench.workload import ours_reports_ready
from helm_operator.dev.tools import REPO_ROOT, Toolchain

GROUPS = 50
SAMPLES = 10  # sample CRs, half Memcached, half Nginx
SETTLE_S = 20.0
AGENTS = ("kopf/", "OpenAPI-Generator/")  # kopf's own client, the kubernetes client's


# -- generated CRDs (pure) ---------------------------------------------------------------------
def _schema(i: int, target_bytes: int) -> dict[str, Any]:
    """An object schema of nested fields with descriptions, grown until it is ~``target_bytes``."""
    props: dict[str, Any] = {}
    j = 0
    while len(json.dumps(props)) < target_bytes:
        props[f"field{j}"] = {
            "type": "object",
            "description": f"Settings block {j} of kind {i}: what a provider's resource would document "
            "about this part of the spec, a sentence or two long, as generated API docs are.",
            "properties": {
                "name": {
                    "type": "string",
                    "description": "The name of the referenced object.",
                    "maxLength": 253,
                },
                "enabled": {"type": "boolean", "description": "Whether this block takes effect."},
                "replicas": {"type": "integer", "format": "int32", "minimum": 0},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "mode": {"type": "string", "enum": ["Auto", "Manual", "Disabled"]},
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"key": {"type": "string"}, "value": {"type": "string"}},
                        "required": ["key"],
                    },
                },
            },
        }
        j += 1
    return {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": props},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }


def unrelated_crds(n: int, groups: int = GROUPS) -> list[dict[str, Any]]:
    """``n`` CRDs of ``groups`` groups the operator does not watch; schemas of 10-30 KB, every
    fifth kind with two served versions (v1beta1 too)."""
    out = []
    for i in range(n):
        group = f"g{i % groups}.many-crds.bench.example"
        kind = f"Thing{i}"
        plural = f"thing{i}s"
        schema = _schema(i, 10_000 + (i * 7919) % 20_000)
        names = ["v1", "v1beta1"] if i % 5 == 0 else ["v1"]
        versions = [
            {"name": v, "served": True, "storage": v == "v1", "schema": {"openAPIV3Schema": schema}}
            for v in names
        ]
        out.append(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.{group}", "labels": {"bench.helm-operator/many-crds": "1"}},
                "spec": {
                    "group": group,
                    "names": {
                        "kind": kind,
                        "plural": plural,
                        "singular": f"thing{i}",
                        "listKind": f"{kind}List",
                    },
                    "scope": "Namespaced",
                    "versions": versions,
                },
            }
        )
    return out


def count_requests(records: list[dict[str, Any]], since: float) -> dict[str, int]:
    """The operator's list/watch requests after ``since`` (epoch s), from audit records: all of
    them, those on CRDs, and those on resources of the generated groups (which it must not touch)."""
    counts = {"list/watch": 0, "crd list/watch": 0, "unrelated list/watch": 0}
    for r in records:
        agent = str(r.get("userAgent") or "")
        if not agent.startswith(AGENTS) or r.get("stage") != "ResponseComplete":
            continue
        stamp = str(r.get("requestReceivedTimestamp") or "")
        try:
            t = time.mktime(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        except ValueError:
            continue
        if t < since - 1:
            continue
        uri = str(r.get("requestURI") or "")
        counts["list/watch"] += 1
        if "/customresourcedefinitions" in uri:
            counts["crd list/watch"] += 1
        if ".many-crds.bench.example/" in uri:
            counts["unrelated list/watch"] += 1
    return counts


# -- one run of the operator -------------------------------------------------------------------
def apply_docs(cluster: BenchCluster, docs: list[dict[str, Any]], batch: int = 25) -> None:
    for k in range(0, len(docs), batch):
        body = {"apiVersion": "v1", "kind": "List", "items": docs[k : k + batch]}
        cluster.kubectl(
            "apply", "--server-side", "--field-manager=bench", "-f", "-", input=json.dumps(body), timeout=300
        )


def samples(ns: str) -> list[dict[str, Any]]:
    out = []
    for i in range(SAMPLES):
        path = REPO_ROOT / ("samples/memcached.yaml" if i % 2 == 0 else "samples/nginx.yaml")
        doc = yaml.safe_load(path.read_text())
        doc["metadata"] = {"name": f"{doc['metadata']['name']}-{i}", "namespace": ns}
        out.append(doc)
    return out


def ready_samples(cluster: BenchCluster, ns: str) -> int:
    ready = 0
    for group, version, plural in (
        ("cache.example.com", "v1alpha1", "memcacheds"),
        ("example.com", "v1", "nginxes"),
    ):
        listing = cluster.custom.list_namespaced_custom_object(group, version, ns, plural)
        ready += sum(1 for cr in listing.get("items") or [] if ours_reports_ready(cr))
    return ready


def measure(label: str, cluster: BenchCluster, python: str, helm: Path, root: Path) -> dict[str, Any]:
    ns = f"many-crds-{label}-{int(time.time())}"
    cluster.create_namespace(ns)
    apply_docs(cluster, samples(ns))
    workdir = root / ns
    workdir.mkdir(parents=True)
    port = free_port()
    cmd = [
        python, "-m", "helm_operator.cli", "run", "--watches-file", str(REPO_ROOT / "watches.yaml"),
        "--kubeconfig", str(cluster.kubeconfig), "--helm", str(helm), "--namespace", ns,
        "--health-probe-bind-address", f"127.0.0.1:{port}",
    ]  # fmt: skip
    env = {**os.environ, **helm_homes(workdir), "PYTHONPATH": str(REPO_ROOT)}
    log = (workdir / "operator.log").open("wb")
    began_wall, began = time.time(), time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        ready_s = None
        while time.monotonic() - began < 300 and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        ready_s = time.monotonic() - began
                        break
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        if ready_s is None:
            raise RuntimeError(f"{label}: /readyz never answered 200; see {workdir / 'operator.log'}")
        converged_s = None
        while time.monotonic() - began < 600:
            if ready_samples(cluster, ns) >= SAMPLES:
                converged_s = time.monotonic() - began
                break
            time.sleep(1.0)
        time.sleep(SETTLE_S)
        rss, peak = rss_mib(proc.pid)
        cpu = own_cpu_seconds(proc.pid)
        requests = count_requests(cluster.dev.audited(), began_wall)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        for group, version, plural in (
            ("cache.example.com", "v1alpha1", "memcacheds"),
            ("example.com", "v1", "nginxes"),
        ):
            cluster.strip_finalizers(group, version, plural, ns)
        cluster.delete_namespace(ns)
    return {
        "label": label, "ready_s": ready_s, "converged_s": converged_s, "rss_mib": rss,
        "peak_mib": peak, "cpu_s": cpu, **requests,
    }  # fmt: skip


def report(rows: list[dict[str, Any]], machine: str, n: int) -> str:
    def f(v: Any, spec: str = ".1f") -> str:
        return "—" if v is None else format(v, spec)

    lines = [
        "# Many CRDs the operator does not serve",
        "",
        f"{machine}. `python -m bench.many_crds --crds {n}`: one local control plane (KWOK nodes), the "
        f"repository's CRDs and `watches.yaml` (7 kinds), {SAMPLES} sample CRs (Memcached, Nginx); the "
        f"operator started with 0, then with {n} unrelated CRDs installed ({GROUPS} groups, 10-30 KB "
        "schemas, every fifth with two versions). Ready: process start to `/readyz` 200; converged: "
        f"every sample CR Ready; RSS after {SETTLE_S:.0f} s settling (and peak); CPU of the operator "
        "process alone; list/watch requests of its clients (audit log; discovery GETs are not audited).",
        "",
        "| unrelated CRDs | ready s | converged s | RSS MiB | peak MiB | CPU s | list/watch | on CRDs "
        "| on unrelated groups |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} | {f(r['ready_s'])} | {f(r['converged_s'])} | {f(r['rss_mib'])} | "
            f"{f(r['peak_mib'])} | {f(r['cpu_s'])} | {r['list/watch']} | {r['crd list/watch']} | "
            f"{r['unrelated list/watch']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.many_crds", description=__doc__)
    p.add_argument("--crds", type=int, default=500)
    p.add_argument("--kubeconfig", type=Path, default=None, help="a running cluster (default: start one)")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "bench/results/many-crds.md")
    args = p.parse_args(argv)
    tools = Toolchain.discover()
    tools.require("helm")
    python = runtime_env.python(lambda line: print(line, file=sys.stderr))
    cluster = BenchCluster.open(args.kubeconfig, tools, pods=40)
    root = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-many-crds-{os.getpid()}"
    rows = []
    try:
        for path in sorted((REPO_ROOT / "crds").glob("*.yaml")):
            cluster.apply_crd(yaml.safe_load(path.read_text()))
        rows.append(measure("0", cluster, python, tools.helm, root))
        print(f"  {rows[-1]}", file=sys.stderr, flush=True)
        print(f"applying {args.crds} unrelated CRDs ...", file=sys.stderr, flush=True)
        apply_docs(cluster, unrelated_crds(args.crds))
        cluster.kubectl(
            "wait", "--for=condition=Established", "crd", "-l", "bench.helm-operator/many-crds=1",
            "--timeout=600s", timeout=620,
        )  # fmt: skip
        rows.append(measure(str(args.crds), cluster, python, tools.helm, root))
        print(f"  {rows[-1]}", file=sys.stderr, flush=True)
    finally:
        cluster.close()
    machine = (
        f"{os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 2**30} GiB"
    )
    args.out.write_text(report(rows, machine, args.crds))
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
