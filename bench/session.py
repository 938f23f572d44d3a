"""The setting every benchmark runs in: the local control plane (a running one named by
HELM_OPERATOR_KUBECONFIG, or one started for the run), the sample CRDs, a namespace of its own,
and the real operator (helm v4) with the shipped watches, watching only that namespace."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from helm_operator.dev import images
from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.realnode import RealNode
from helm_operator.dev.tools import Toolchain
from tests.e2e.operator import REPO, OperatorProcess, Resources, shipped_watches

REAL_NODE_WAIT = 3600.0  # seconds


@contextmanager
def bench_session(name: str, *, real_node: bool = False) -> Iterator[Resources]:
    """Yield the namespace's resources (``.cluster``, ``.ns``) while the operator runs; clean up
    afterwards. ``real_node``: a started cluster gets the real node, with every image."""
    tools = Toolchain.discover()
    reuse = os.environ.get("HELM_OPERATOR_KUBECONFIG")
    cluster = DevCluster.attach(reuse, tools=tools) if reuse else DevCluster(tools=tools, nodes=4).start()
    if real_node and not reuse:
        # One real node per machine: another run's is waited for (it releases it when it ends).
        cluster.real_node = RealNode(cluster.root, cluster.kubeconfig, tools)
        try:
            cluster.real_node.start(lambda: images.archives().values(), lock_wait=REAL_NODE_WAIT)
        except BaseException:
            cluster.stop()
            raise
    workdir = Path(tempfile.mkdtemp(prefix=f"{name}-bench-"))
    ns = f"bench-{os.urandom(3).hex()}"
    try:
        cluster.kubectl("apply", "-f", str(REPO / "crds"))
        cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        cluster.kubectl("create", "namespace", ns)
        watches = workdir / "watches.yaml"
        watches.write_text(yaml.safe_dump(shipped_watches()))
        op = OperatorProcess(cluster, tools.helm, workdir, watches, [ns])
        op.start()
        try:
            yield Resources(cluster, ns)
        finally:
            op.stop()
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        if not reuse:
            cluster.stop()
