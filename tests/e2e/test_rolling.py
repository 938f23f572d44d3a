"""A StatefulSet rolled member by member by an after-upgrade hook (``rolling.roll``): with
``updateStrategy: OnDelete`` Helm's upgrade changes only the template, and the hook restarts one
member at a time, the highest ordinal first and the named primary last, each replacement on the
new revision and healthy before the next goes; a member that is not healthy holds the roll before
any member goes; an operator killed while the roll waits is followed by one that finishes it. KWOK
makes the Pods Ready; what is real is the order and the waiting."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import yaml

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import custom
from .operator import REPO, OperatorProcess, Resources, eventually, simple_crd

GROUP = "roll.test.helm-operator.io"
KIND = f"ensembles.{GROUP}"


def pods(res: Resources, name: str) -> dict[str, dict[str, Any]]:
    out = res.cluster.kubectl(
        "get", "pods", "-n", res.ns, "-l", f"app.kubernetes.io/instance={name}", "-o", "json"
    )
    return {p["metadata"]["name"]: p for p in json.loads(out.stdout)["items"]}


def revision_of(res: Resources, name: str) -> str:
    sts = res.get("statefulset", f"{name}-members") or {}
    return str((sts.get("status") or {}).get("updateRevision"))


def roll_of(res: Resources, name: str) -> dict[str, Any]:
    return dict(((res.get(KIND, name) or {}).get("status") or {}).get("day2", {}).get("roll") or {})


def day2_of(res: Resources, name: str) -> dict[str, Any]:
    return dict(((res.get(KIND, name) or {}).get("status") or {}).get("day2") or {})


def on_revision(res: Resources, name: str, revision: str) -> bool:
    found = pods(res, name)
    return len(found) == 3 and all(
        p["metadata"]["labels"].get("controller-revision-hash") == revision
        and not p["metadata"].get("deletionTimestamp")
        for p in found.values()
    )


def test_members_restart_one_at_a_time_highest_first_primary_last_each_healthy_before_the_next(
    cluster: DevCluster, tools: Toolchain, solo_namespace: str, tmp_path: Path
) -> None:
    ns, res = solo_namespace, Resources(cluster, solo_namespace)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(simple_crd(GROUP, "Ensemble", "ensembles")))
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{KIND}", "--timeout=60s")
    watches = tmp_path / "watches.yaml"
    entry = {
        "group": GROUP,
        "version": "v1",
        "kind": "Ensemble",
        "chart": str(REPO / "tests/e2e/charts/members"),
        "hooks": str(REPO / "tests/e2e/hooks/rolling_members.py"),
        "timeout": "60s",
    }
    watches.write_text(yaml.safe_dump([entry]))
    op = OperatorProcess(cluster, tools.helm, tmp_path, watches, [ns])
    op.start()
    try:
        name = "trio"
        primary = f"{name}-members-1"
        res.apply(custom(f"{GROUP}/v1", "Ensemble", name, {"tag": "1", "primary": primary}))
        res.wait_condition(KIND, name, "Ready", timeout=120)
        first = revision_of(res, name)
        eventually(lambda: on_revision(res, name, first), timeout=60, what="three members on revision 1")
        before = {n: p["metadata"]["uid"] for n, p in pods(res, name).items()}

        res.apply(custom(f"{GROUP}/v1", "Ensemble", name, {"tag": "2", "primary": primary}))
        second = eventually(
            lambda: (r := revision_of(res, name)) != first and r, timeout=60, what="a new template revision"
        )
        eventually(lambda: on_revision(res, name, second), timeout=180, what="every member on revision 2")
        after = pods(res, name)
        assert all(after[n]["metadata"]["uid"] != uid for n, uid in before.items()), "each one restarted"
        created = sorted(after, key=lambda n: after[n]["metadata"]["creationTimestamp"])
        assert created[-1] == primary, created  # the primary last
        day2 = eventually(
            lambda: (
                (roll := roll_of(res, name)).get("remaining") == [] and roll.get("member") is None and roll
            ),
            timeout=60,
            what="the roll recorded",
        )
        assert day2["rolled"] == [f"{name}-members-2", f"{name}-members-0", primary], day2
        assert day2["revision"] == second and day2["remaining"] == [], day2
        reasons = [e["reason"] for e in res.events(name)]
        assert reasons.count("MemberRestarting") == 3 and "Rolled" in reasons, reasons
        # The primary's handover, once, before it went, offered only the members already restarted.
        moved = [e["message"] for e in res.events(name) if e["reason"] == "PrimaryMoved"]
        assert moved == [f"{primary} hands over to one of {name}-members-0, {name}-members-2"], moved
        res.wait_condition(KIND, name, "Ready", timeout=60)

        # An unhealthy member holds the roll before any member goes; healthy again, it goes on.
        held = f"{name}-members-0"
        cluster.kubectl("annotate", "pod", held, "-n", ns, "example.com/healthy=false")
        before = {n: p["metadata"]["uid"] for n, p in pods(res, name).items()}
        res.apply(custom(f"{GROUP}/v1", "Ensemble", name, {"tag": "3", "primary": primary}))
        third = eventually(
            lambda: (r := revision_of(res, name)) != second and r,
            timeout=60,
            what="a third template revision",
        )
        time.sleep(8)
        assert {n: p["metadata"]["uid"] for n, p in pods(res, name).items()} == before, "no member went"

        # The operator dies while the roll waits (SIGKILL: nothing is cleaned up). The status says
        # the upgrade's after hooks had not finished; the next process runs them again at start,
        # without a Helm action, and the roll goes on once the member is healthy again.
        assert day2_of(res, name).get("afterHooksPending") == "upgrade", day2_of(res, name)
        upgrades = sum(1 for c in op.helm_calls() if c.startswith("upgrade "))
        op.stop(signal.SIGKILL)
        op.start()
        cluster.kubectl("annotate", "pod", held, "-n", ns, "example.com/healthy-")
        eventually(lambda: on_revision(res, name, third), timeout=180, what="every member on revision 3")
        eventually(
            lambda: "afterHooksPending" not in day2_of(res, name),  # (null in a merge patch: removed)
            timeout=60,
            what="the after hooks recorded as finished",
        )
        assert sum(1 for c in op.helm_calls() if c.startswith("upgrade ")) == upgrades
        assert roll_of(res, name)["revision"] == third
        res.delete(KIND, name)
    finally:
        op.stop()
        cluster.kubectl("delete", "crd", KIND, "--ignore-not-found", "--wait=false", check=False)
