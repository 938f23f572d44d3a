"""An API server outage: concise logs with backoff while it lasts, a line when it is back, and
every resource served again after it.

The operator reaches the API server through a loopback forwarder that the test cuts for a while:
every connection reset, every new one refused, as that operator sees an outage.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from pathlib import Path

import yaml

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain
from helm_operator.drift.dependents import RETRY_CAP

from .operator import OperatorProcess, Resources, eventually
from .proxy import Proxy

KIND = "tinies.test.helm-operator.io"
RESOURCES = 12
OUTAGE = 40.0


def test_an_api_server_outage_is_logged_concisely_and_survived(
    cluster: DevCluster, crds: None, tools: Toolchain, e2e_watches: Path, tmp_path: Path
) -> None:
    ns = f"z-outage-{os.urandom(2).hex()}"
    cluster.kubectl("create", "namespace", ns)
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    server = urllib.parse.urlsplit(config["clusters"][0]["cluster"]["server"])
    proxy = Proxy((server.hostname or "127.0.0.1", server.port or 443))
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    op = OperatorProcess(cluster, tools.helm, tmp_path, e2e_watches, [ns], kubeconfig=tmp_path / "kubeconfig")
    op.start()
    res = Resources(cluster, ns)
    try:
        for i in range(RESOURCES):
            res.apply(
                {
                    "apiVersion": "test.helm-operator.io/v1",
                    "kind": "Tiny",
                    "metadata": {"name": f"o{i}"},
                    "spec": {},
                }
            )
        for i in range(RESOURCES):
            res.wait_condition(KIND, f"o{i}", "Ready", timeout=120)
        before = len(op.log())
        started = time.monotonic()
        proxy.down()
        time.sleep(OUTAGE)
        proxy.up()
        back = time.monotonic()
        during = op.log()[before:]
        rate = len(during) / (back - started)
        assert "Traceback" not in during, during[-3000:]
        assert rate < 600, f"{rate:.0f} bytes/s of logs during the outage:\n{during[-3000:]}"
        res.apply(
            {
                "apiVersion": "test.helm-operator.io/v1",
                "kind": "Tiny",
                "metadata": {"name": "after"},
                "spec": {},
            }
        )
        res.wait_condition(KIND, "after", "Ready", timeout=120)
        # Each watch tries again on its own backoff (at most RETRY_CAP apart), so its line may come
        # after the new resource was served through kopf's watch.
        for watch in ("Deployment.apps/v1", "Helm's release storage"):
            what = f"watch of {watch} is back after"
            eventually(lambda what=what: what in op.log()[before:], timeout=RETRY_CAP + 20, what=repr(what))
        res.delete(KIND, "o0")  # the finalizer still works
    finally:
        op.stop()
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
