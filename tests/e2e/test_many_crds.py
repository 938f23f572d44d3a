"""CRDs the operator does not serve cost it nothing: it never lists CRDs with their schemas (it
notices them by name), and a CRD of a watched kind deleted and created again while it runs is
served again, in a namespace of its pattern created after the start."""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .operator import REPO, OperatorProcess, Resources, simple_crd

UNRELATED = 10


def _apply_established(cluster: DevCluster, *crds: dict[str, Any]) -> None:
    body = {"apiVersion": "v1", "kind": "List", "items": list(crds)}
    cluster.kubectl("apply", "--server-side", "--field-manager=e2e", "-f", "-", input=json.dumps(body))
    names = [crd["metadata"]["name"] for crd in crds]
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names])


@pytest.fixture(scope="module")
def unrelated(cluster: DevCluster, crds: None) -> Iterator[str]:
    """CRDs of a group no operator serves, each with a ~20 KB schema; their group."""
    group = f"u{os.urandom(2).hex()}.unrelated.test.helm-operator.io"
    field = {"type": "string", "description": "A field an operator of this group would document. " * 4}
    properties = {f"field{j}": field for j in range(80)}
    _apply_established(
        cluster, *[simple_crd(group, f"Unrelated{i}", f"unrelated{i}s", properties) for i in range(UNRELATED)]
    )
    yield group
    for i in range(UNRELATED):
        cluster.kubectl("delete", "crd", f"unrelated{i}s.{group}", "--wait=false", check=False)


def _crd_requests(cluster: DevCluster, since: datetime) -> list[tuple[str, dict[str, list[str]]]]:
    """(verb, query) of every list and watch of CRDs by an operator (kopf's client) since ``since``."""
    found = []
    for record in cluster.audited():
        ref: Any = record.get("objectRef") or {}
        stamp = str(record.get("requestReceivedTimestamp") or "")
        if ref.get("resource") != "customresourcedefinitions" or not stamp:
            continue
        if not str(record.get("userAgent") or "").startswith("kopf/"):
            continue
        if datetime.fromisoformat(stamp.replace("Z", "+00:00")) < since:
            continue
        uri = urllib.parse.urlsplit(str(record["requestURI"]))
        found.append((str(record["verb"]), urllib.parse.parse_qs(uri.query)))
    return found


def test_crds_are_never_listed_with_their_schemas_and_a_recreated_kind_is_served_again(
    cluster: DevCluster, unrelated: str, tools: Toolchain, tmp_path: Path
) -> None:
    tools.require("helm")
    group = f"again{os.urandom(2).hex()}.test.helm-operator.io"
    kind = f"agains.{group}"
    crd = simple_crd(group, "Again", "agains")
    _apply_established(cluster, crd)
    watches = tmp_path / "watches.yaml"
    chart = str(REPO / "tests/e2e/charts/tiny")
    watches.write_text(json.dumps([{"group": group, "version": "v1", "kind": "Again", "chart": chart}]))
    prefix = f"mcrd{os.urandom(2).hex()}"
    started = datetime.now(UTC).replace(microsecond=0)
    op = OperatorProcess(cluster, tools.helm, tmp_path, watches, [f"{prefix}-*"])
    op.start()
    namespaces = [f"{prefix}-{i}" for i in range(4)]
    try:
        for i, ns in enumerate(namespaces):
            if i:  # The kind's CRD goes and comes back: the operator serves it again, every time.
                cluster.kubectl("delete", "crd", kind, timeout=120)
                _apply_established(cluster, crd)
            # A namespace of the pattern created after the start is served.
            cluster.kubectl("create", "namespace", ns)
            res = Resources(cluster, ns)
            res.apply({"apiVersion": f"{group}/v1", "kind": "Again", "metadata": {"name": "one"}, "spec": {}})
            res.wait_condition(kind, "one", "Ready", timeout=90)
            res.delete(kind, "one")
    finally:
        op.stop()
        for ns in namespaces:
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        cluster.kubectl("delete", "crd", kind, "--wait=false", check=False)

    # CRDs are only watched from a version and listed one at a time (for that version): never the
    # listing of every CRD with its schema, which the unrelated ones would make ~200 KB here.
    requests = _crd_requests(cluster, started)
    assert any(verb == "watch" for verb, _ in requests), requests
    for verb, query in requests:
        if verb == "list":
            assert query.get("limit") == ["1"], (verb, query)
        else:
            assert query.get("resourceVersion") and "sendInitialEvents" not in query, (verb, query)
