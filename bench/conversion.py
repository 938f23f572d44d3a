"""The conversion webhook: what a read through it costs, and a storage migration of N objects.

One local control plane; the ``Greeting`` CRD of the e2e test (``greetings.conv.test.helm-operator.io``,
v1 ``spec.message``, v2 ``spec.greeting.text``) served in v1 and v2, stored as v1; the operator
started as the other benches start it (the runtime-only virtualenv), watching v2 with the converters
of ``tests/e2e/hooks/greeting_versions.py`` and serving the webhook on loopback. It watches a
namespace the objects are not in: the webhook serves every conversion regardless of namespaces, so
only the webhook is measured, not N Helm installs. N objects are created as v1 (stored as v1).

Then, sequentially and alternating (v1, v2, v1, v2, ...) so background load hits both alike: many
GETs of one object as v2 (the API server calls the webhook: stored v1) and as v1 (no conversion);
a few LISTs of all N objects in each version; the operator's own ``helm_operator_conversion_seconds``
histogram (from its ``/metrics``) before and after each phase, for the webhook's own share. Then
the storage moves to v2 and ``helm-operator migrate-storage`` rewrites every object (wall seconds,
objects/s, ``status.storedVersions`` after), and the reads are timed once more (now v1 converts).
``python -m bench.conversion [--objects 1000] [--gets 500] [--kubeconfig K] [--out F]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from bench import runtime_env
from bench.cluster import BenchCluster
from bench.contenders import free_port, helm_homes, http_get
from bench.stats import percentile
from helm_operator.dev.tools import REPO_ROOT, Toolchain

GROUP = "conv.test.helm-operator.io"
CRD = f"greetings.{GROUP}"
PLURAL = "greetings"
HOOKS = REPO_ROOT / "tests/e2e/hooks/greeting_versions.py"
HISTOGRAM = "helm_operator_conversion_seconds"
COUNTER = "helm_operator_conversions_total"
WARMUP = 20
LISTS = 3
QUANTILES = (50, 90, 99)


# -- pure helpers (unit-tested) ----------------------------------------------------------------
def crd(storage: str) -> dict[str, Any]:
    """The Greeting CRD with v1 and v2 served, ``storage`` the storage version."""
    schemas = {
        "v1": {"message": {"type": "string"}},
        "v2": {
            "greeting": {
                "type": "object",
                "properties": {"text": {"type": "string"}, "emphasis": {"type": "boolean"}},
            }
        },
    }
    versions = [
        {
            "name": v,
            "served": True,
            "storage": v == storage,
            "subresources": {"status": {}},
            "schema": {
                "openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": schemas[v]},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    },
                }
            },
        }
        for v in ("v1", "v2")
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": "Greeting",
                "plural": PLURAL,
                "singular": "greeting",
                "listKind": "GreetingList",
            },
            "versions": versions,
        },
    }


def greeting_v1(i: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Greeting",
        "metadata": {"name": f"g-{i:05d}"},
        "spec": {"message": f"hello {i}"},
    }


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_metrics(text: str, prefixes: Sequence[str] = (HISTOGRAM, COUNTER)) -> dict[str, float]:
    """The samples of the named metric families in Prometheus text: ``name{labels}`` -> value."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(tuple(prefixes)):
            continue
        m = _SAMPLE.match(line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def delta(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def histogram(samples: Mapping[str, float], name: str = HISTOGRAM) -> dict[str, Any]:
    """count, sum, mean and estimated quantiles (Prometheus' histogram_quantile: linear within
    the bucket) of one unlabelled histogram's samples (typically a delta of two scrapes)."""
    count = samples.get(f"{name}_count", 0.0)
    total = samples.get(f"{name}_sum", 0.0)
    buckets: list[tuple[float, float]] = []
    for key, value in samples.items():
        m = re.fullmatch(rf'{name}_bucket\{{le="([^"]+)"\}}', key)
        if m:
            buckets.append((float(m.group(1)), value))
    buckets.sort()
    out: dict[str, Any] = {"count": count, "sum": total, "mean": total / count if count else None}
    for q in QUANTILES:
        out[f"p{q}"] = bucket_quantile(buckets, q / 100) if count else None
    return out


def bucket_quantile(buckets: Sequence[tuple[float, float]], q: float) -> float | None:
    """``histogram_quantile(q, ...)`` over cumulative ``(le, count)`` buckets sorted by ``le``; a
    rank in the +Inf bucket answers the highest finite bound."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for le, cum in buckets:
        if cum >= rank:
            if le == float("inf"):
                return lower
            if cum == below:
                return le
            return lower + (le - lower) * (rank - below) / (cum - below)
        lower, below = le, cum
    return lower


def latency(values: Sequence[float]) -> dict[str, float]:
    """Quantiles of seconds, as milliseconds."""
    return {f"p{q}": percentile(values, q) * 1000 for q in QUANTILES}


def _ms(v: float | None, spec: str = ".2f") -> str:
    return "—" if v is None else format(v, spec)


def read_table(title: str, reads: Mapping[str, Sequence[float]], converting: str) -> list[str]:
    """Markdown rows of GET latency by version, and the difference of the converting one."""
    other = "v1" if converting == "v2" else "v2"
    conv, plain = latency(reads[converting]), latency(reads[other])
    lines = [
        f"**{title}**",
        "",
        "| GET as | conversion | n | p50 ms | p90 ms | p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    for version in ("v1", "v2"):
        q = latency(reads[version])
        lines.append(
            f"| {version} | {'webhook' if version == converting else 'none'} | {len(reads[version])} | "
            + " | ".join(_ms(q[f"p{p}"]) for p in QUANTILES)
            + " |"
        )
    lines.append(
        f"| difference | {converting} - {other} | | "
        + " | ".join(_ms(conv[f"p{p}"] - plain[f"p{p}"], "+.2f") for p in QUANTILES)
        + " |"
    )
    return [*lines, ""]


def webhook_row(label: str, h: Mapping[str, Any], failures: float) -> str:
    mean = h["mean"] * 1000 if h["mean"] is not None else None
    qs = " | ".join(_ms(h[f"p{q}"] * 1000 if h[f"p{q}"] is not None else None) for q in QUANTILES)
    return f"| {label} | {h['count']:.0f} | {_ms(mean, '.3f')} | {qs} | {failures:.0f} |"


def _per(r: Mapping[str, Any], label: str, total: bool = False) -> str:
    """The reviews of the phase whose label contains ``label``, per object (or in total)."""
    for name, h, _ in r["webhook"]:
        if label in name:
            return f"{h['count']:.0f}" if total else f"{h['count'] / r['objects']:.1f}"
    return "—"


def report(r: Mapping[str, Any]) -> str:
    n, lists = r["objects"], r["lists"]
    mig = r["migration"]
    lines = [
        "# The conversion webhook: read latency and a storage migration",
        "",
        f"{r['machine']}; Kubernetes {r['server']}. `python -m bench.conversion --objects {n} "
        f"--gets {r['gets']}`: one local control plane (KWOK), the Greeting CRD of the e2e test "
        f"(`{CRD}`, v1 and v2 served, stored as v1), the operator from the runtime-only virtualenv "
        "watching v2 with the converters of `tests/e2e/hooks/greeting_versions.py`, its webhook on "
        "loopback (`--conversion-bind-address 127.0.0.1:PORT`). The operator watches a namespace "
        f"the {n} objects are not in: the API server calls the webhook regardless of namespaces, so "
        "this measures the conversions alone, not Helm installs. "
        f"{n} objects created as v1 in {r['create_s']:.1f} s (8 threads, "
        "one create each).",
        "",
        f"Reads: {r['gets']} GETs of one object per version, sequential and alternating v1/v2 after "
        f"{WARMUP} warm-up each (python kubernetes client, raw bytes, its own overhead in both); "
        f"{LISTS} LISTs of all {n} per version. Webhook share: the operator's "
        f"`{HISTOGRAM}` (time in its handler per ConversionReview, from JSON parsed to answer "
        "built; TLS and HTTP not included), scraped before and after each phase; quantiles are "
        "estimated from its buckets. Machine load while measuring (loadavg 1 min): "
        f"{r['load']} — other work shared the 2 cores, so absolute numbers are noisy; the "
        "alternating order makes the difference fair.",
        "",
        *read_table("Stored as v1 (GET as v2 converts)", r["reads_before"], "v2"),
        "| LIST all | stored as v1 | " + " | ".join(f"run {i + 1} ms" for i in range(LISTS)) + " |",
        "|---|---|" + "---|" * LISTS,
    ]
    for version in ("v1", "v2"):
        lines.append(
            f"| {n} as {version} | {'converted' if version == 'v2' else 'as stored'} | "
            + " | ".join(f"{s * 1000:.0f}" for s in lists[version])
            + " |"
        )
    lines += [
        "",
        f"Webhook reviews during the LISTs as v2: {_per(r, 'LISTs', total=True)} (see below).",
        "",
        "**The webhook's own time**, by phase: ConversionReviews it answered (whatever sent them: "
        "the client's request, or the API server's watch caches converting what was written) and "
        "its handler's time per review",
        "",
        "| phase | reviews | mean ms | p50 ms | p90 ms | p99 ms | failed |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, h, failed in r["webhook"]:
        lines.append(webhook_row(label, h, failed))
    lines += [
        "",
        f"**Migration** (CRD applied with v2 as storage, then `helm-operator migrate-storage {CRD}`)",
        "",
        "| objects | wall s (process) | s (tool's own count) | objects/s | storedVersions before | after |",
        "|---|---|---|---|---|---|",
        f"| {mig['objects']} | {mig['wall_s']:.1f} | {_ms(mig['tool_s'], '.1f')} | "
        f"{mig['objects'] / mig['wall_s']:.0f} | {mig['stored_before']} | {mig['stored_after']} |",
        "",
        "Wall: the process, interpreter start and imports included; objects/s from it. The tool "
        "lists in pages of 200 and writes each object back unchanged, one at a time "
        f"({_per(r, 'migrate-storage')} webhook reviews per object during it).",
        "",
        *read_table("Stored as v2 after the migration (GET as v1 converts now)", r["reads_after"], "v1"),
    ]
    if r["errors"]:
        lines += ["**Errors seen**", "", *(f"- {e}" for e in r["errors"]), ""]
    else:
        lines += ["No request failed and the webhook refused no conversion.", ""]
    return "\n".join(lines)


# -- the run -----------------------------------------------------------------------------------
def chart(root: Path) -> Path:
    """The e2e test's chart 2.x: one ConfigMap with ``.Values.greeting.text``."""
    path = root / "greeting-2.0.0"
    (path / "templates").mkdir(parents=True)
    (path / "Chart.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v2", "name": "greeting", "version": "2.0.0"})
    )
    (path / "values.yaml").write_text("{}\n")
    (path / "templates/configmap.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-greeting\n"
        'data:\n  text: {{ .Values.greeting.text | default "" | quote }}\n'
    )
    return path


def scrape(port: int) -> dict[str, float]:
    status, body = http_get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    if status != 200:
        raise RuntimeError(f"/metrics answered {status}")
    return parse_metrics(body)


def failures(d: Mapping[str, float]) -> float:
    return sum(v for k, v in d.items() if k.startswith(COUNTER) and 'result="Failure"' in k)


def settle(port: int, quiet_s: float = 3.0, limit_s: float = 120.0) -> None:
    """Until the webhook's review count stops moving for ``quiet_s`` (the API server's watch
    caches convert what was written, asynchronously)."""
    deadline = time.monotonic() + limit_s
    last = histogram(scrape(port))["count"]
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = histogram(scrape(port))["count"]
        if now == last:
            return
        last = now


def apply_crd(cluster: BenchCluster, doc: dict[str, Any]) -> None:
    done = cluster.dev.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=bench", "-f", "-",
        input=json.dumps(doc), check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"kubectl apply of the CRD failed: {done.stderr.strip()}")
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{CRD}", "--timeout=60s")


def stored_versions(cluster: BenchCluster) -> list[str]:
    doc = json.loads(cluster.kubectl("get", "crd", CRD, "-o", "json").stdout)
    return list(doc["status"].get("storedVersions") or [])


class Run:
    def __init__(self, cluster: BenchCluster, ns: str, gets: int, errors: list[str]) -> None:
        self.cluster, self.ns, self.gets, self.errors = cluster, ns, gets, errors

    def path(self, version: str, name: str = "") -> str:
        base = f"/apis/{GROUP}/{version}/namespaces/{self.ns}/{PLURAL}"
        return f"{base}/{name}" if name else base

    def get(self, path: str) -> bytes:
        return self.cluster._get(path)

    def reads(self, name: str) -> dict[str, list[float]]:
        """Alternating single-object GETs as v1 and v2; failures are recorded, not timed."""
        out: dict[str, list[float]] = {"v1": [], "v2": []}
        for i in range(WARMUP + self.gets):
            for version in ("v1", "v2"):
                began = time.perf_counter()
                try:
                    self.get(self.path(version, name))
                except ApiException as exc:
                    self.errors.append(f"GET {version} {name}: {exc.status} {exc.reason}")
                    continue
                if i >= WARMUP:
                    out[version].append(time.perf_counter() - began)
        return out

    def lists(self, n: int) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {"v1": [], "v2": []}
        for _ in range(LISTS):
            for version in ("v1", "v2"):
                began = time.perf_counter()
                body = json.loads(self.get(self.path(version)))
                out[version].append(time.perf_counter() - began)
                items = body.get("items") or []
                if len(items) != n:
                    self.errors.append(f"LIST {version}: {len(items)} items, not {n}")
                want = "message" if version == "v1" else "greeting"
                wrong = [i["metadata"]["name"] for i in items if want not in (i.get("spec") or {})]
                if wrong:
                    self.errors.append(f"LIST {version}: {len(wrong)} items without spec.{want}")
        return out


def create(cluster: BenchCluster, ns: str, n: int, errors: list[str]) -> float:
    def one(i: int) -> None:
        try:
            cluster.custom.create_namespaced_custom_object(GROUP, "v1", ns, PLURAL, greeting_v1(i))
        except ApiException as exc:
            errors.append(f"create g-{i:05d}: {exc.status} {exc.reason}")

    began = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))
    return time.perf_counter() - began


def wait_for_webhook(cluster: BenchCluster, port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until the CRD points at this webhook and a read as v2 converts."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the operator exited {proc.returncode}; see {log}")
        doc = json.loads(cluster.kubectl("get", "crd", CRD, "-o", "json").stdout)
        conv = doc["spec"].get("conversion") or {}
        url = ((conv.get("webhook") or {}).get("clientConfig") or {}).get("url")
        if conv.get("strategy") == "Webhook" and url == f"https://127.0.0.1:{port}/convert":
            return
        time.sleep(0.5)
    raise RuntimeError(f"the CRD never pointed at the webhook on port {port}; see {log}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.conversion", description=__doc__)
    p.add_argument("--objects", type=int, default=1000)
    p.add_argument("--gets", type=int, default=500, help="timed single-object GETs per version")
    p.add_argument("--kubeconfig", type=Path, default=None, help="a running cluster (default: start one)")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "bench/results/conversion.md")
    args = p.parse_args(argv)
    tools = Toolchain.discover()
    tools.require("helm")
    python = runtime_env.python(lambda line: print(line, file=sys.stderr))
    cluster = BenchCluster.open(args.kubeconfig, tools, pods=40)
    stamp = int(time.time())
    ns, op_ns, secret = f"conv-bench-{stamp}", f"conv-bench-{stamp}-op", f"conv-bench-{stamp}"
    root = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-conversion-{os.getpid()}"
    root.mkdir(parents=True)
    errors: list[str] = []
    loads: list[float] = []
    proc: subprocess.Popen[bytes] | None = None
    say: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        cluster.create_namespace(ns)
        cluster.create_namespace(op_ns)
        apply_crd(cluster, crd("v1"))
        watches = root / "watches.yaml"
        watches.write_text(
            yaml.safe_dump(
                [
                    {"group": GROUP, "version": "v2", "kind": "Greeting", "chart": str(chart(root)),
                     "hooks": str(HOOKS)},
                ]
            )
        )  # fmt: skip
        port, metrics_port = free_port(), free_port()
        cmd = [
            python, "-m", "helm_operator.cli", "run", "--watches-file", str(watches),
            "--kubeconfig", str(cluster.kubeconfig), "--helm", str(tools.helm), "--namespace", op_ns,
            "--conversion-bind-address", f"127.0.0.1:{port}", "--conversion-secret", f"default/{secret}",
            "--metrics-bind-address", f"127.0.0.1:{metrics_port}", "--health-probe-bind-address", "0",
        ]  # fmt: skip
        env = {**os.environ, **helm_homes(root), "PYTHONPATH": str(REPO_ROOT)}
        log = root / "operator.log"
        proc = subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for_webhook(cluster, port, proc, log)
        settle(metrics_port)
        run = Run(cluster, ns, args.gets, errors)
        probe = "g-00000"
        webhook: list[tuple[str, dict[str, Any], float]] = []

        def phase(label: str, fn: Callable[[], Any], wait: bool = False) -> Any:
            """``fn`` with the webhook's reviews it caused (until they settle when ``wait``)."""
            before = scrape(metrics_port)
            loads.append(os.getloadavg()[0])
            out = fn()
            if wait:
                settle(metrics_port)
            d = delta(scrape(metrics_port), before)
            webhook.append((label, histogram(d), failures(d)))
            say(f"  {label}: {webhook[-1][1]}")
            return out

        say(f"webhook on 127.0.0.1:{port}; creating {args.objects} Greetings as v1 ...")
        create_s = phase(
            f"create {args.objects} as v1", lambda: create(cluster, ns, args.objects, errors), wait=True
        )
        reads_before = phase(f"{args.gets} GETs as v2 (+{WARMUP} warm-up)", lambda: run.reads(probe))
        lists = phase(f"{LISTS} LISTs of {args.objects} as v2", lambda: run.lists(args.objects))

        say("storage -> v2; migrate-storage ...")
        phase("CRD applied with storage v2", lambda: apply_crd(cluster, crd("v2")), wait=True)
        stored_before = stored_versions(cluster)

        def migrate() -> tuple[float, subprocess.CompletedProcess[str]]:
            began = time.perf_counter()
            done = subprocess.run(
                [python, "-m", "helm_operator.cli", "migrate-storage", CRD,
                 "--kubeconfig", str(cluster.kubeconfig)],
                cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800,
            )  # fmt: skip
            return time.perf_counter() - began, done

        wall, done = phase(f"migrate-storage of {args.objects}", migrate)
        say(done.stdout + done.stderr)
        if done.returncode != 0:
            errors.append(f"migrate-storage exited {done.returncode}: {done.stderr.strip()}")
        m = re.search(r"(\d+) objects stored as v2 in ([\d.]+)s", done.stdout)
        stored_after = stored_versions(cluster)
        if stored_after != ["v2"]:
            errors.append(f"storedVersions after the migration: {stored_after}")
        if m and int(m.group(1)) != args.objects:
            errors.append(f"migrate-storage rewrote {m.group(1)} objects, not {args.objects}")
        reads_after = phase(f"{args.gets} GETs as v1 after (+{WARMUP} warm-up)", lambda: run.reads(probe))
        sample = json.loads(run.get(run.path("v2", probe)))
        if sample["spec"] != {"greeting": {"text": "hello 0"}}:
            errors.append(f"{probe} as v2 after the migration: {sample['spec']}")
        result = {
            "machine": (
                f"{os.cpu_count()} cores, "
                f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 2**30} GiB"
            ),
            "server": cluster.server_version(),
            "objects": args.objects,
            "gets": args.gets,
            "create_s": create_s,
            "load": ", ".join(f"{x:.1f}" for x in loads),
            "reads_before": reads_before,
            "lists": lists,
            "webhook": webhook,
            "migration": {
                "objects": args.objects,
                "wall_s": wall,
                "tool_s": float(m.group(2)) if m else None,
                "stored_before": stored_before,
                "stored_after": stored_after,
            },
            "reads_after": reads_after,
            "errors": errors,
        }
        args.out.write_text(report(result))
        print(args.out.read_text())
    finally:
        say("cleaning up ...")
        dev = cluster.dev
        # Not waited for here (kubectl would watch each of N); the namespace's deletion waits.
        dev.kubectl(
            "delete", f"{PLURAL}.{GROUP}", "--all", "-n", ns, "--wait=false", check=False, timeout=600
        )
        for name in (ns, op_ns):
            try:
                cluster.delete_namespace(name)
            except (ApiException, TimeoutError) as exc:
                say(f"namespace {name}: {exc}")
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        dev.kubectl("delete", "crd", CRD, "--ignore-not-found", check=False, timeout=300)
        dev.kubectl("delete", "secret", secret, "-n", "default", "--ignore-not-found", check=False)
        cluster.close()
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
