"""What a failed e2e test leaves behind: a compact diagnosis in its report, full copies on disk.

When a test fails (in its setup or its body), this gathers what one needs to tell a product race
from a test defect without running it again: the tail of every operator process that served it,
the Events, Pods (with their logs) and custom resources' conditions of the namespaces it made,
``helm list``, the load average and what the last wait saw. The compact part goes into pytest's
report of the test (and so into the part's log); everything is copied to ``.work/e2e-artifacts/<test>/``, with
``summary.txt`` the few lines ``tools/test-parts`` prints in the run's closing block.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.realnode import RealNode

from . import pace
from .operator import REPO, OperatorProcess, Wait, said

ARTIFACTS = Path(os.environ.get("HELM_OPERATOR_E2E_ARTIFACTS", REPO / ".work/e2e-artifacts"))
TAIL = 12  # operator log lines per process in the compact diagnosis


POD_LOGS = 20  # Pods of a namespace whose logs a failed test keeps


def folder_for(nodeid: str) -> Path:
    """The artifacts folder of one test (its node id made a file name)."""
    return ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid.split("/")[-1]).strip("_")[:150]


def namespaces_since(cluster: DevCluster, since: float) -> list[str]:
    """Namespaces created at or after ``since`` (epoch seconds; a second of clock slack)."""
    out = cluster.kubectl("get", "namespaces", "-o", "json", check=False, timeout=20)
    if out.returncode != 0:
        return []
    found = []
    for ns in json.loads(out.stdout).get("items", []):
        created = ns["metadata"].get("creationTimestamp")
        when = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp() if created else 0.0
        name = ns["metadata"]["name"]
        if when >= since - 1 and name != "default" and not name.startswith("kube-"):  # a new cluster's own
            found.append(name)
    return found


def _kinds(cluster: DevCluster) -> list[str]:
    out = cluster.kubectl("get", "crd", "-o", "jsonpath={.items[*].metadata.name}", check=False, timeout=20)
    return out.stdout.split() if out.returncode == 0 else []


def conditions(items: list[dict[str, Any]]) -> list[str]:
    """One line per custom resource: kind/name, deletion, and its conditions (type=status reason: message)."""
    lines = []
    for obj in items:
        meta = obj.get("metadata", {})
        head = f"{obj.get('kind')}/{meta.get('name')}"
        if meta.get("deletionTimestamp"):
            head += f" (deleting; finalizers {meta.get('finalizers')})"
        conds = (obj.get("status") or {}).get("conditions") or []
        said = "; ".join(
            f"{c.get('type')}={c.get('status')} {c.get('reason', '')}: {str(c.get('message', ''))[:160]}"
            for c in conds
        )
        lines.append(f"{head}: {said or 'no conditions'}")
    return lines


def gather(
    nodeid: str,
    cluster: DevCluster | None,
    helm: Path | None,
    since: float,
    operators: list[tuple[OperatorProcess, int]],
    failure: BaseException | None = None,
) -> str:
    """Write the artifacts of a failed test; return the compact diagnosis. ``operators``: each
    process that served the test with the first of its starts that did (a shared one's earlier
    starts served other tests); ``failure``: what the test raised (a failed call's own words are
    not in its message)."""
    folder = folder_for(nodeid)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nodeid").write_text(nodeid + "\n")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    out: list[str] = [f"load average {load}; slowdown factor {pace.FACTOR:.2f}; artifacts {folder}"]
    if Wait.what:
        error = f"; last error: {Wait.error}" if Wait.error else ""
        out.append(f"last wait: {Wait.what} ({Wait.seconds:.1f}s): last={str(Wait.last)[:300]}{error}")
    if isinstance(failure, (subprocess.CalledProcessError, subprocess.TimeoutExpired)):
        out.append(f"the call that failed said: {said(failure)}")
    summary = list(out)
    for i, (op, first) in enumerate(operators):
        for start in range(max(1, first), op.starts + 1):
            log = op.workdir / f"operator-{start}.log"
            if not log.exists():
                continue
            text = log.read_text(errors="replace")
            (folder / f"operator-{i}-{start}.log").write_text(text)
            tail = text.splitlines()[-TAIL:]
            out.append(f"--- operator {i} start {start} ({log}), last {len(tail)} lines:")
            out.extend(line[:240] for line in tail)
            if start == op.starts:
                summary.append(f"operator {i} log tail ({log}):")
                summary.extend(line[:200] for line in tail[-6:])
        calls = op.calls_log.read_text(errors="replace") if op.calls_log.exists() else ""
        (folder / f"operator-{i}-helm-calls.log").write_text(calls)
    if cluster is not None:
        try:
            out.extend(_cluster_state(cluster, helm, since, folder))
        except (subprocess.SubprocessError, OSError, ValueError) as exc:
            out.append(f"(could not read the cluster: {exc})")
    (folder / "diagnosis.txt").write_text("\n".join(out) + "\n")
    (folder / "summary.txt").write_text("\n".join(summary) + "\n")
    return "\n".join(out)


def _cluster_state(cluster: DevCluster, helm: Path | None, since: float, folder: Path) -> list[str]:
    out: list[str] = []
    namespaces = namespaces_since(cluster, since)
    kinds = ",".join(_kinds(cluster))
    for ns in namespaces:
        events = cluster.kubectl(
            "get", "events", "-n", ns, "--sort-by=.lastTimestamp", check=False, timeout=20
        ).stdout
        (folder / f"events-{ns}.txt").write_text(events)
        out.append(f"--- namespace {ns}: last events")
        out.extend(line[:240] for line in events.splitlines()[-10:])
        out.extend(_pods(cluster, ns, folder))
        if kinds:
            got = cluster.kubectl("get", kinds, "-n", ns, "-o", "json", check=False, timeout=30)
            if got.returncode == 0:
                (folder / f"resources-{ns}.json").write_text(got.stdout)
                items = json.loads(got.stdout).get("items", [])
                out.append(f"--- namespace {ns}: custom resources")
                out.extend(conditions([i for i in items if i.get("kind") != "Rollout"]) or ["(none)"])
    if helm is not None:
        listed = subprocess.run(
            [str(helm), "list", "-A", "-a"], env=cluster.env, text=True, capture_output=True, timeout=30
        )
        (folder / "helm-list.txt").write_text(listed.stdout + listed.stderr)
        rows = [line for line in listed.stdout.splitlines()[1:] if len(line.split()) > 1]
        mine = [line for line in rows if line.split()[1] in namespaces]
        out.append("--- helm list (the test's namespaces)")
        out.extend(mine or ["(no release)"])
    return out


def _pods(cluster: DevCluster, ns: str, folder: Path) -> list[str]:
    """The namespace's Pods (phase, restarts, node) in the diagnosis, and their containers' logs
    with timestamps in ``pod-logs-<ns>.txt`` (the real node's: what a database or etcd member said
    while the test failed; a fake node's Pods have none)."""
    listed = cluster.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False, timeout=20).stdout
    (folder / f"pods-{ns}.txt").write_text(listed)
    names = cluster.kubectl("get", "pods", "-n", ns, "-o", "name", check=False, timeout=20).stdout.split()
    logs = []
    for name in names[:POD_LOGS]:
        for previous in ([], ["--previous"]):
            got = cluster.kubectl(
                "logs", "-n", ns, name, "--all-containers", "--prefix", "--timestamps", "--tail=400",
                *previous, check=False, timeout=20,
            )  # fmt: skip
            if got.returncode == 0 and got.stdout:
                logs.append(f"=== {name}{' (previous)' if previous else ''}\n{got.stdout}")
    if logs:
        (folder / f"pod-logs-{ns}.txt").write_text("\n".join(logs))
    return [f"--- namespace {ns}: pods", *(line[:240] for line in listed.splitlines()[: POD_LOGS + 1])]


def keep_cluster_logs(cluster: DevCluster) -> None:
    """Copy the control plane's component logs (API server, controllers, scheduler, KWOK, audit)
    to ``.work/e2e-artifacts/cluster-<name>/`` before the cluster and its folder are removed."""
    for logs in cluster.root.glob("kwok/clusters/*/logs"):
        shutil.copytree(logs, ARTIFACTS / f"cluster-{cluster.name}", dirs_exist_ok=True)


def keep_node_logs(node: RealNode) -> None:
    """Copy the real node's component logs (containerd, kubelet, kube-proxy, CoreDNS) to
    ``.work/e2e-artifacts/real-node/`` before the node and its folder are removed."""
    if node.paths.logs.is_dir():
        shutil.copytree(node.paths.logs, ARTIFACTS / "real-node", dirs_exist_ok=True)
