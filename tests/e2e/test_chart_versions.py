"""Chart versions side by side on the local control plane: a watch serves two versions of its
chart, a resource that pins nothing runs the newest, a pinned one runs what its range selects and
says a newer one is available (status and metric), moving the pin upgrades it, and a pin nothing
matches is a precise stall."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from helm_operator.core.naming import CHART_VERSION_ANNOTATION
from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import TINY_WATCH, Helm, releases, tiny
from .operator import REPO, OperatorProcess, Resources, eventually, metrics

TINY = "tinies.test.helm-operator.io"
WATCH_KEY = "Tiny.v1.test.helm-operator.io"


def two_versions(root: Path) -> list[dict[str, str]]:
    """The tiny chart as 0.1.0 and as 0.2.0, whose ConfigMap also says which version made it."""
    old, new = root / "tiny-0.1.0", root / "tiny-0.2.0"
    shutil.copytree(REPO / "tests/e2e/charts/tiny", old)
    shutil.copytree(old, new)
    chart = yaml.safe_load((new / "Chart.yaml").read_text())
    (new / "Chart.yaml").write_text(yaml.safe_dump({**chart, "version": "0.2.0"}))
    template = new / "templates/configmap.yaml"
    template.write_text(template.read_text().replace("\ndata:\n", '\ndata:\n  chartVersion: "0.2.0"\n', 1))
    return [{"chart": str(new)}, {"chart": str(old), "version": "0.1.0"}]


def pinned(name: str, pin: str | None) -> dict[str, Any]:
    doc = tiny(name)
    if pin is not None:
        doc["metadata"]["annotations"] = {CHART_VERSION_ANNOTATION: pin}
    return doc


def chart_of(helm: Helm, ns: str, name: str) -> str:
    return str(releases(helm, ns)[name]["chart"])


def test_two_chart_versions_side_by_side_pins_and_what_is_newer(
    cluster: DevCluster, tools: Toolchain, helm4: Helm, solo_namespace: str, tmp_path: Path
) -> None:
    watch = {k: v for k, v in TINY_WATCH.items() if k != "chart"}
    watch["charts"] = two_versions(tmp_path)
    watches = tmp_path / "watches.yaml"
    watches.write_text(yaml.safe_dump([watch]))
    (tmp_path / "op").mkdir()
    op = OperatorProcess(cluster, tools.helm, tmp_path / "op", watches, [solo_namespace])
    op.start()
    res = Resources(cluster, solo_namespace)
    try:
        res.apply(pinned("latest", None))
        res.apply(pinned("held", "~0.1"))
        for name in ("latest", "held"):
            res.wait_condition(TINY, name, "Ready", timeout=90)
        assert chart_of(helm4, res.ns, "latest") == "tiny-0.2.0"
        assert chart_of(helm4, res.ns, "held") == "tiny-0.1.0"
        assert (res.get("configmap", "latest-config") or {})["data"]["chartVersion"] == "0.2.0"
        assert "chartVersion" not in (res.get("configmap", "held-config") or {})["data"]

        held = (res.get(TINY, "held") or {})["status"]
        assert held["release"]["chartVersion"] == "0.1.0"
        assert held["chart"] == {
            "version": "0.1.0",
            "pin": "~0.1",
            "served": ["0.1.0", "0.2.0"],
            "newest": "0.2.0",
            "upgradeAvailable": True,
        }, held["chart"]
        assert (res.get(TINY, "latest") or {})["status"]["chart"]["upgradeAvailable"] is False
        gauge = f'helm_operator_chart_upgrade_available{{watch="{WATCH_KEY}"}}'
        eventually(lambda: metrics(op.metrics_port).get(gauge) == 1.0, timeout=30, what="one resource behind")

        res.apply(pinned("held", "0.2.x"))  # the pin moves: an upgrade to the version it selects now
        eventually(lambda: chart_of(helm4, res.ns, "held") == "tiny-0.2.0", timeout=60, what="the upgrade")
        res.wait_condition(TINY, "held", "Ready", timeout=60)
        eventually(
            lambda: not (res.get(TINY, "held") or {})["status"]["chart"]["upgradeAvailable"],
            timeout=30,
            what="nothing newer",
        )
        eventually(lambda: metrics(op.metrics_port).get(gauge) == 0.0, timeout=30, what="none behind")

        res.apply(pinned("nowhere", "~9.1"))
        stalled = res.wait_condition(TINY, "nowhere", "Stalled", timeout=60)
        assert stalled["reason"] == "ChartVersionNotServed", stalled
        assert "'~9.1' matches none of the served chart versions (0.1.0, 0.2.0)" in stalled["message"], (
            stalled
        )
        assert "nowhere" not in releases(helm4, res.ns)
        for name in ("latest", "held", "nowhere"):
            res.delete(TINY, name)
    finally:
        op.stop()
