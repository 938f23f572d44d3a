"""The Day2 condition has one owner, an invalid field holds only what it governs, and a deletion
that a hook holds waits quietly and lets go at once when overridden (tests/e2e/hooks/faulty.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import custom
from .operator import OperatorProcess, Resources, eventually
from .pace import within

HOOKED = "hookeds.test.helm-operator.io"


def hooked(name: str, **spec: Any) -> dict[str, Any]:
    return custom("test.helm-operator.io/v1", "Hooked", name, spec)


def day2(res: Resources, name: str) -> dict[str, Any]:
    return dict(((res.get(HOOKED, name) or {}).get("status") or {}).get("day2") or {})


def annotate(res: Resources, name: str, *pairs: str) -> None:
    res.cluster.kubectl("annotate", HOOKED, name, "-n", res.ns, "--overwrite", *pairs)


def test_a_later_success_never_hides_a_failing_translator(operator: OperatorProcess, res: Resources) -> None:
    res.apply(hooked("mistranslated", fault="raise"))
    ready = res.wait_condition(HOOKED, "mistranslated", "Ready", status="False", timeout=60)
    assert ready["reason"] == "HookFailed", ready
    # The watch hook ran afterwards, and succeeded (no ConfigMap: nothing was installed).
    eventually(
        lambda: day2(res, "mistranslated").get("configMaps") == 0, timeout=30, what="the watch hook ran"
    )
    time.sleep(2)
    c = res.condition(HOOKED, "mistranslated", "Day2")
    assert (c["status"], c["reason"]) == ("False", "HookFailed"), c
    assert "values translate raised RuntimeError: the translator broke" in c["message"], c
    assert [p["source"] for p in day2(res, "mistranslated")["problems"]] == ["values"]

    res.apply(hooked("mistranslated"))  # fixed
    res.wait_condition(HOOKED, "mistranslated", "Ready", timeout=90)
    eventually(
        lambda: res.condition(HOOKED, "mistranslated", "Day2").get("status") == "True",
        timeout=30,
        what="Day2=True",
    )
    assert day2(res, "mistranslated")["problems"] == []


def test_an_invalid_field_holds_only_what_it_governs(operator: OperatorProcess, res: Resources) -> None:
    res.apply(hooked("partial", backup={"every": 10, "target": ""}))
    res.wait_condition(HOOKED, "partial", "Ready", timeout=90)
    c = res.wait_condition(HOOKED, "partial", "Day2", status="False", timeout=30)
    assert c["reason"] == "InvalidSpec" and "spec.backup.target: must not be empty" in c["message"], c
    # The watch hook and an action that uses no backup field go on...
    eventually(lambda: day2(res, "partial").get("configMaps") == 1, timeout=30, what="the watch hook")
    annotate(res, "partial", "helm-operator.io/action=ping=hello")
    eventually(lambda: day2(res, "partial").get("pinged") == "hello", timeout=30, what="ping ran")
    # ...while the backup schedule is not armed and a backup request waits, saying why.
    annotate(res, "partial", "helm-operator.io/action=backup-now")
    held = eventually(
        lambda: "action backup-now waits" in res.condition(HOOKED, "partial", "Day2").get("message", ""),
        timeout=30,
        what="the held action on Day2",
    )
    assert held
    c = res.condition(HOOKED, "partial", "Day2")
    assert "spec.backup.target: must not be empty" in c["message"], c
    res.wait_event("partial", "ActionHeld")
    time.sleep(12)  # longer than the interval
    status = day2(res, "partial")
    assert "tick" not in (status.get("schedules") or {}) and "backedUp" not in status, status
    assert (res.get(HOOKED, "partial") or {})["metadata"]["annotations"][
        "helm-operator.io/action"
    ] == "backup-now"

    # Fixed: the schedule is armed and the waiting request runs.
    res.apply(hooked("partial", backup={"every": 10, "target": "s3://bucket"}))
    eventually(lambda: "backedUp" in day2(res, "partial"), timeout=30, what="the held backup ran")
    eventually(lambda: int(day2(res, "partial").get("ticks") or 0) >= 1, timeout=40, what="a scheduled tick")
    eventually(
        lambda: res.condition(HOOKED, "partial", "Day2").get("status") == "True", timeout=30, what="Day2=True"
    )

    # An invalid interval holds its schedule alone, and says so.
    res.apply(hooked("interval", backup={"every": "soon"}))
    c = res.wait_condition(HOOKED, "interval", "Day2", status="False", timeout=60)
    assert c["reason"] == "InvalidSpec" and "spec.backup.every" in c["message"], c
    annotate(res, "interval", "helm-operator.io/action=ping=still")
    eventually(lambda: day2(res, "interval").get("pinged") == "still", timeout=30, what="ping ran")


def test_a_held_deletion_waits_for_a_change_and_lets_go_at_once(
    operator: OperatorProcess, res: Resources
) -> None:
    res.apply(hooked("refused", uninstall="refuse"))
    res.wait_condition(HOOKED, "refused", "Ready", timeout=90)
    res.delete(HOOKED, "refused", wait=False)
    c = res.wait_condition(HOOKED, "refused", "Ready", status="False", timeout=30, generation=False)
    assert c["reason"] == "UninstallBlocked" and "refusing to uninstall" in c["message"], c
    assert res.condition(HOOKED, "refused", "Day2")["reason"] == "UninstallBlocked"
    time.sleep(12)  # a permanent failure is not tried again until something changes
    assert day2(res, "refused")["refusals"] == 1
    started = time.monotonic()
    annotate(res, "refused", "helm-operator.io/force-uninstall=true")
    eventually(lambda: not res.exists(HOOKED, "refused"), timeout=30, what="deletion let go")
    assert time.monotonic() - started < within(10), "the override acts at once, not at the next retry"

    res.apply(hooked("saving", uninstall="wait"))
    res.wait_condition(HOOKED, "saving", "Ready", timeout=90)
    log_before = len(operator.log().splitlines())
    res.delete(HOOKED, "saving", wait=False)
    c = res.wait_condition(HOOKED, "saving", "Ready", status="False", timeout=30, generation=False)
    assert c["reason"] == "UninstallWaiting" and "still being saved" in c["message"], c
    eventually(lambda: int(day2(res, "saving").get("waits") or 0) >= 3, timeout=30, what="a few looks")
    annotate(res, "saving", "test.helm-operator.io/saved=true")
    eventually(lambda: not res.exists(HOOKED, "saving"), timeout=30, what="deletion done once saved")
    waiting = [e for e in res.events("saving") if e["reason"] == "UninstallWaiting"]
    assert [e["type"] for e in waiting] == ["Normal"], waiting  # said once, not as a warning
    assert not [e for e in res.events("saving") if e["type"] == "Warning"]
    lines = operator.log().splitlines()[log_before:]
    noisy = [line for line in lines if "saving" in line and ("ERROR" in line or "WARNING" in line)]
    assert not noisy, noisy


def test_a_scheduled_run_records_when_it_started_not_its_last_look(
    operator: OperatorProcess, res: Resources
) -> None:
    from helm_operator.core.conditions import parse_rfc3339

    res.apply(hooked("slow", backup={"every": 10, "slow": True}))
    last = eventually(
        lambda: ((day2(res, "slow").get("schedules") or {}).get("tick") or {}).get("lastRun"),
        timeout=60,
        what="a finished run",
    )
    assert last["phase"] == "Succeeded" and day2(res, "slow")["attempt"] == [last["name"], 3], last
    took = parse_rfc3339(last["completionTime"]) - parse_rfc3339(last["startTime"])
    assert took >= 5, last  # two retries 3 s apart: the run began before its last attempt


def test_no_scheduled_run_starts_once_the_operator_is_told_to_stop(
    cluster: DevCluster, crds: None, tools: Toolchain, e2e_watches: Path, tmp_path: Path
) -> None:
    """SIGTERM while a Helm action runs (the operator lets it finish, which can take minutes):
    from that moment no scheduled run starts. Before, schedules went on until the very end."""
    import datetime as dt
    import os
    import signal

    from helm_operator.core.conditions import parse_rfc3339

    from .conftest import tiny

    ns = f"s-drain-{os.urandom(2).hex()}"
    cluster.kubectl("create", "namespace", ns)
    op = OperatorProcess(cluster, tools.helm, tmp_path, e2e_watches, [ns])
    op.start()
    res = Resources(cluster, ns)
    try:
        res.apply(hooked("ticking", backup={"every": 10}))

        def schedule() -> dict[str, Any]:
            return dict((day2(res, "ticking").get("schedules") or {}).get("tick") or {})

        eventually(lambda: schedule().get("lastRun"), timeout=60, what="a first run")
        # An install that waits (its Pods can never schedule) until the watch's 60 s timeout.
        res.apply(tiny("stuck", nodeSelector={"example.com/no-such-node": "true"}))
        eventually(lambda: any(c.startswith("upgrade stuck ") for c in op.helm_calls()), what="helm runs")
        stopped_at = time.time()
        assert op.proc is not None
        op.proc.send_signal(signal.SIGTERM)
        time.sleep(15)  # past the next slot, while the operator waits for helm
        assert op.proc.poll() is None, "the operator lets the running helm action finish"
        last = schedule().get("lastScheduleTime")
        when = dt.datetime.fromtimestamp(stopped_at, dt.UTC)
        assert last and parse_rfc3339(last) < stopped_at, (last, when)
        assert "SIGTERM received: stopping" in op.log()
    finally:
        op.stop(timeout=120)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_a_hook_beside_helm_never_writes_back_the_conditions_it_read(
    operator: OperatorProcess, res: Resources
) -> None:
    """A watch hook that runs beside Helm (outside the release's lock) reads the resource, runs on
    while the reconcile upgrades it and writes Ready for the new generation, then fails: its report
    (the Day2 condition) is composed on the status as it is when written, so Ready keeps saying
    the new generation, never the one the hook read (tests/e2e/hooks/faulty.py, ``slow_look``)."""
    res.apply(hooked("racy", slowLook=True))
    res.wait_condition(HOOKED, "racy", "Ready", timeout=90)
    eventually(lambda: day2(res, "racy").get("looking") == 1, timeout=60, what="the slow look running")
    res.apply(hooked("racy", slowLook=True, message="changed"))
    upgraded = res.wait_condition(HOOKED, "racy", "Ready", timeout=90)  # for generation 2
    assert upgraded["observedGeneration"] == 2, upgraded
    annotate(res, "racy", "test.helm-operator.io/end-look=now")
    res.wait_condition(HOOKED, "racy", "Day2", status="False", timeout=60, generation=False)
    ready = res.condition(HOOKED, "racy", "Ready")  # a later reconcile may have said it again
    assert (ready.get("status"), ready.get("observedGeneration")) == ("True", 2) and "revision 2" in str(
        ready.get("message")
    ), f"Ready went back to what the hook read before the upgrade: {ready}"
