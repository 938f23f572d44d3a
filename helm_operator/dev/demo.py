"""``helm-operator dev demo``: the main job on a laptop — a local control plane on fake nodes, the
CRDs, the operator on a watches file, and the samples applied and waited for until Ready."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from helm_operator.dev.devcluster import DevCluster, wait_for_signal
from helm_operator.dev.tools import REPO_ROOT


def run(name: str, nodes: int, watches_file: Path, namespace: str, keep: bool = False) -> int:
    """0 once every sample is Ready (``keep``: then wait for Ctrl-C), 1 if one is not."""
    with (
        DevCluster(name, nodes=nodes) as cluster,
        tempfile.NamedTemporaryFile(prefix="helm-operator-", suffix=".log", delete=False) as log,
    ):
        print(f"cluster {cluster.name} is ready (kubeconfig {cluster.kubeconfig})")
        print(cluster.kubectl("get", "nodes").stdout)
        cluster.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
        cluster.kubectl("apply", "-f", str(REPO_ROOT / "config/02-crd-rollouts.yaml"))  # staged rollouts
        cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        operator = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "helm_operator.cli",
                "run",
                "--helm",
                str(cluster.tools.helm),
                "--watches-file",
                str(watches_file),
                "--kubeconfig",
                str(cluster.kubeconfig),
                "--namespace",
                namespace,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            cluster.kubectl("create", "namespace", namespace)
            print(f"operator running (log: {log.name}); applying samples/ to namespace {namespace}")
            cluster.kubectl("apply", "-n", namespace, "-f", str(REPO_ROOT / "samples"))
            wait = cluster.kubectl(
                "wait",
                "-n",
                namespace,
                "--for=condition=Ready",
                "--timeout=300s",
                *(f"{k}/{n}" for k, n in sample_refs(REPO_ROOT / "samples")),
                check=False,
                timeout=330,
            )
            print(wait.stdout + wait.stderr)
            print(cluster.kubectl("get", "-n", namespace, "helm-operator").stdout)
            print(cluster.kubectl("get", "-n", namespace, "statefulsets,deployments,services").stdout)
            if wait.returncode != 0:
                print(f"some samples did not become Ready; operator log: {log.name}", file=sys.stderr)
                return 1
            if keep:
                print(f"export KUBECONFIG={cluster.kubeconfig}\nCtrl-C stops the operator and the cluster.")
                sys.stdout.flush()
                wait_for_signal()
        finally:
            operator.terminate()
            operator.wait(150)
    return 0


def sample_refs(folder: Path) -> list[tuple[str, str]]:
    """(resource, name) of every custom resource in the sample files."""
    refs = []
    for path in sorted(folder.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                group = doc["apiVersion"].split("/")[0] if "/" in doc["apiVersion"] else ""
                refs.append((f"{doc['kind'].lower()}.{group}".rstrip("."), doc["metadata"]["name"]))
    return refs
