"""A watch's ``selector`` filters on the API server: the operator lists and watches only the custom
resources it selects (the audit log shows every list and watch of the kind carrying the selector),
handles those, and never touches the others — until one is labelled into the selector."""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import TINY_WATCH
from .operator import OperatorProcess, Resources, eventually

TINY = "tinies.test.helm-operator.io"
SELECTOR = {
    "matchLabels": {"shard": "one"},
    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "db"]}],
}
QUERY = "shard=one,tier in (db,web)"


@pytest.fixture(scope="module")
def selecting(
    cluster: DevCluster, crds: None, tools: Toolchain, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """An operator (helm v4) for ``sel-*`` whose Tiny watch selects shard=one, tier in (web, db)."""
    tools.require("helm")
    workdir = tmp_path_factory.mktemp("selector")
    watches = workdir / "watches.yaml"
    watches.write_text(yaml.safe_dump([{**TINY_WATCH, "selector": SELECTOR}]))
    op = OperatorProcess(cluster, tools.helm, workdir, watches, ["sel-*"])
    op.start()
    yield op
    op.stop()


def tiny(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "test.helm-operator.io/v1",
        "kind": "Tiny",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicaCount": 1},
    }


def requests_for(cluster: DevCluster, ns: str) -> list[tuple[str, str]]:
    """(verb, labelSelector) of every list and watch of Tiny resources in ``ns`` by an operator."""
    found = []
    for record in cluster.audited():
        ref: Any = record.get("objectRef") or {}
        agent = str(record.get("userAgent") or "")
        if ref.get("resource") != "tinies" or ref.get("namespace") != ns or agent.startswith("kubectl"):
            continue
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(str(record["requestURI"])).query)
        found.append((str(record["verb"]), (query.get("labelSelector") or [""])[0]))
    return found


def test_only_the_selected_resources_reach_the_operator_and_one_labelled_in_is_served(
    selecting: OperatorProcess, cluster: DevCluster, tmp_path: Path
) -> None:
    ns = f"sel-{os.urandom(3).hex()}"
    cluster.kubectl("create", "namespace", ns)
    res = Resources(cluster, ns)
    try:
        res.apply(tiny("chosen", shard="one", tier="web"))
        res.apply(tiny("other-shard", shard="two", tier="web"))
        res.apply(tiny("other-tier", shard="one", tier="batch"))
        res.wait_condition(TINY, "chosen", "Ready", timeout=120)
        assert res.exists("deployment", "chosen")

        # The API server filtered: every list and watch of the kind in this namespace carried the
        # selector (kopf would otherwise have listed all three and dropped two itself).
        seen = eventually(lambda: requests_for(cluster, ns), timeout=30, what="the operator's watch")
        assert ("watch", QUERY) in seen, seen
        assert all(selector == QUERY for _, selector in seen), seen
        for name in ("other-shard", "other-tier"):
            obj = res.get(TINY, name) or {}
            assert not obj.get("status") and not obj["metadata"].get("finalizers"), obj
            assert not res.exists("deployment", name)

        # Labelled into the selector: the API server now sends it, and it is served.
        cluster.kubectl("label", TINY, "other-tier", "-n", ns, "tier=db", "--overwrite")
        res.wait_condition(TINY, "other-tier", "Ready", timeout=120)
        assert res.exists("deployment", "other-tier")
        assert not (res.get(TINY, "other-shard") or {}).get("status")
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=true", timeout=180, check=False)
