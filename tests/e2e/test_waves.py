"""Many resources applied at once: each one's status tells the truth as soon as its own release is
installed, not when the whole wave is done (one slot of the kind, so installs run one by one)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import yaml

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import TINY_WATCH, tiny
from .operator import OperatorProcess, Resources

TINIES = "tinies.test.helm-operator.io"
WAVE = 16  # about 0.3 s an install here: the wave spans seconds (timestamps have seconds only)


def _time(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_each_status_is_written_when_its_own_install_is_done_not_after_the_wave(
    cluster: DevCluster, crds: None, tools: Toolchain, solo_namespace: str, tmp_path: Path
) -> None:
    ns = solo_namespace
    watches = tmp_path / "watches.yaml"
    watches.write_text(yaml.safe_dump([{**TINY_WATCH, "maxConcurrentReconciles": 1}]))
    (tmp_path / "op").mkdir()
    op = OperatorProcess(cluster, tools.helm, tmp_path / "op", watches, [ns])
    res = Resources(cluster, ns)
    names = [f"wave-{i}" for i in range(WAVE)]
    # Applied before the operator starts: its first listing queues every one of them at once.
    docs = [{**tiny(name), "metadata": {"name": name, "namespace": ns}} for name in names]
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    op.start()
    try:
        for name in names:
            res.wait_condition(TINIES, name, "Released", timeout=180)
    finally:
        op.stop()
    secrets = json.loads(
        cluster.kubectl("get", "secrets", "-n", ns, "-l", "owner=helm,version=1", "-o", "json").stdout
    )["items"]
    installed = {s["metadata"]["labels"]["name"]: _time(s["metadata"]["creationTimestamp"]) for s in secrets}
    assert sorted(installed) == sorted(names)
    first = min(installed, key=lambda n: installed[n])
    last_install = max(installed.values())
    assert (last_install - installed[first]).total_seconds() >= 2, "the installs did not run one by one"
    # The first release's outcome was written (its InstallSucceeded Event, posted in the same
    # write as its status) before the last install had even started.
    told = [e for e in res.events(first) if e["reason"] == "InstallSucceeded"]
    assert told, res.events(first)
    assert _time(told[0]["firstTimestamp"]) < last_install, (first, told[0], installed)
