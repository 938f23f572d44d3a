"""Maintenance windows on the local control plane: a change outside the window waits (the running
release untouched, drift still corrected) and is applied when the window opens; the override
annotation applies one change at once; an unreadable window is a precise stall.

Every window is placed relative to the test's own clock (one that opens at a whole minute computed
from now, open long enough for the work it must hold; one closed for hours): nothing waits for the
wall clock's minute to come round to a fixed second."""

from __future__ import annotations

import datetime as dt
import time
from math import ceil
from typing import Any
from zoneinfo import ZoneInfo

from helm_operator.core.naming import WINDOW_OVERRIDE_ANNOTATION, WINDOWS_ANNOTATION

from .conftest import Helm, custom, ready_wait_times_out, releases
from .operator import OperatorProcess, Resources, eventually
from .pace import within

MEMCACHED = "memcacheds.cache.example.com"
ZONE = "Asia/Kolkata"  # a zone with a half-hour offset: the windows are read in it, not in UTC


def memcached(name: str, size: int, annotations: dict[str, str]) -> dict[str, Any]:
    doc = custom("cache.example.com/v1alpha1", "Memcached", name, {"size": size})
    doc["metadata"]["annotations"] = annotations
    return doc


def first_minute_after(seconds: float) -> dt.datetime:
    """The first whole minute (a cron's resolution) at least ``seconds`` from now."""
    at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
    whole = at.replace(second=0, microsecond=0)
    return whole if whole == at else whole + dt.timedelta(minutes=1)


def window_at(opens: dt.datetime, seconds: float, daily: bool = False) -> str:
    """The annotation of a window that opens at ``opens`` (a whole minute, written in ZONE's local
    time) for ``seconds``: that day of the year only, or every day at that time."""
    local = opens.astimezone(ZoneInfo(ZONE))
    day = "* *" if daily else f"{local.day} {local.month}"
    return f"{local.minute} {local.hour} {day} * {ceil(seconds)}s {ZONE}"


def far_window() -> tuple[str, dt.datetime]:
    """A window closed now that opens every day twelve hours from now (for an hour), and its
    next opening."""
    opens = first_minute_after(12 * 3600)
    return window_at(opens, 3600, daily=True), opens


def stamp(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def revision(helm: Helm, ns: str, name: str) -> int:
    return int(releases(helm, ns)[name]["revision"])


def updated(helm: Helm, ns: str, name: str) -> dt.datetime:
    """When Helm wrote the release's latest revision (``helm list``: "2026-11-27 00:01:00.48 +0000 UTC")."""
    day, clock, offset = releases(helm, ns)[name]["updated"].split()[:3]
    return dt.datetime.strptime(f"{day} {clock[:15]} {offset}", "%Y-%m-%d %H:%M:%S.%f %z")


def replicas(res: Resources, name: str) -> int:
    return int((res.get("deployment", name) or {})["spec"]["replicas"])


def maintenance(res: Resources, name: str) -> dict[str, Any]:
    return dict(((res.get(MEMCACHED, name) or {}).get("status") or {}).get("maintenance") or {})


def held_while_waiting(res: Resources, name: str, gate_said_last: bool = True) -> None:
    """A held change reads as in progress: Ready tells the truth about what runs (revision 1,
    healthy, for generation 1, the one it was made from), Reconciling=True says why for the new
    generation, and ``kubectl wait --for=condition=Ready`` keeps waiting (it compares the
    condition's observedGeneration with the generation)."""
    body = res.get(MEMCACHED, name) or {}
    generation, status = body["metadata"]["generation"], body["status"]
    ready = res.condition(MEMCACHED, name, "Ready")
    assert (ready["status"], ready["observedGeneration"]) == ("True", 1), ready
    assert status["observedGeneration"] == 1 < generation, status
    if gate_said_last:  # else the workloads' readiness said it since (WorkloadsReady), for 1 as well
        assert ready["reason"] == "UpgradePending" and "revision 1" in ready["message"], ready
    reconciling = res.condition(MEMCACHED, name, "Reconciling")
    assert (reconciling["status"], reconciling["observedGeneration"]) == ("True", generation), reconciling
    ready_wait_times_out(res, MEMCACHED, name)


def test_a_change_outside_the_window_waits_for_it_drift_is_corrected_meanwhile_and_an_override_applies_once(
    operator: OperatorProcess, res: Resources, helm4: Helm
) -> None:
    far, far_opens = far_window()
    shut = {WINDOWS_ANNOTATION: far}
    res.apply(memcached("win", 1, shut))  # a first install never waits
    res.wait_condition(MEMCACHED, "win", "Ready", timeout=60)
    assert revision(helm4, res.ns, "win") == 1

    # Outside the window, a change waits.
    res.apply(memcached("win", 2, shut))
    pending = res.wait_condition(MEMCACHED, "win", "UpgradePending", timeout=30)
    assert pending["reason"] == "OutsideMaintenanceWindow", pending
    held_while_waiting(res, "win")
    # The next opening, read in the window's zone: exactly the one placed.
    assert maintenance(res, "win")["nextWindow"] == stamp(far_opens), (maintenance(res, "win"), far)
    assert stamp(far_opens) in pending["message"] and WINDOW_OVERRIDE_ANNOTATION in pending["message"]
    res.wait_event("win", "UpgradePending")
    assert revision(helm4, res.ns, "win") == 1 and replicas(res, "win") == 1

    # Drift correction goes on while the change waits: a hand-made scale is put back to the running release's.
    res.cluster.kubectl("scale", "deployment", "win", "-n", res.ns, "--replicas=3")
    eventually(lambda: replicas(res, "win") == 1, timeout=30, what="drift corrected while the change waits")
    assert revision(helm4, res.ns, "win") == 1, "no upgrade before the window"
    time.sleep(2)  # the correction's report and the workloads' readiness read after it
    held_while_waiting(res, "win", gate_said_last=False)  # what they said speaks of the running release's

    # An override applies the waiting change at once (the window stays shut for hours), and only that one.
    res.cluster.kubectl("annotate", MEMCACHED, "win", "-n", res.ns, f"{WINDOW_OVERRIDE_ANNOTATION}=change-1")
    eventually(lambda: revision(helm4, res.ns, "win") == 2, timeout=30, what="the overridden change applied")
    assert updated(helm4, res.ns, "win") < far_opens
    # The Event comes with the action's outcome, after Helm has stored the revision.
    overridden = eventually(
        lambda: [e for e in res.events("win") if e["reason"] == "WindowOverridden"],
        timeout=30,
        what="the WindowOverridden Event",
    )
    assert "change-1" in overridden[0]["message"], overridden
    record = eventually(
        lambda: maintenance(res, "win").get("lastOverride"), timeout=30, what="the override recorded"
    )
    assert record["value"] == "change-1", record
    res.wait_condition(MEMCACHED, "win", "UpgradePending", status="False", timeout=30)
    assert replicas(res, "win") == 2

    doc = memcached("win", 3, {**shut, WINDOW_OVERRIDE_ANNOTATION: "change-1"})
    res.apply(doc)  # the same override value: already used, the change waits
    res.wait_condition(MEMCACHED, "win", "UpgradePending", timeout=30)
    assert revision(helm4, res.ns, "win") == 2 and replicas(res, "win") == 2

    # A window that opens soon (room for the operator to read it first), open long enough for the
    # upgrade: the change that waits is applied when it opens, not before.
    opens = first_minute_after(within(10))
    open_for = within(120)
    soon = window_at(opens, open_for)
    res.cluster.kubectl(
        "annotate", "--overwrite", MEMCACHED, "win", "-n", res.ns, f"{WINDOWS_ANNOTATION}={soon}"
    )
    eventually(
        lambda: maintenance(res, "win").get("nextWindow") == stamp(opens),
        timeout=10,
        what=f"the change waits for the window at {stamp(opens)}",
    )
    assert revision(helm4, res.ns, "win") == 2, "no upgrade before the window opens"
    eventually(
        lambda: revision(helm4, res.ns, "win") == 3,
        timeout=(opens - dt.datetime.now(dt.UTC)).total_seconds() + 60,
        what="the upgrade at the window's opening",
    )
    applied = updated(helm4, res.ns, "win")
    assert opens <= applied < opens + dt.timedelta(seconds=open_for), (
        "applied in the window",
        applied,
        opens,
    )
    res.wait_condition(MEMCACHED, "win", "UpgradePending", status="False", timeout=30)
    assert res.wait_condition(MEMCACHED, "win", "Ready", timeout=30)["reason"] != "UpgradePending"
    waited = res.cluster.kubectl(
        "wait", "--for=condition=Ready", f"{MEMCACHED}/win", "-n", res.ns, "--timeout=30s"
    )
    assert waited.returncode == 0  # applied: the wait returns
    assert replicas(res, "win") == 3
    res.delete(MEMCACHED, "win")


def test_an_unreadable_window_is_a_precise_stall_and_nothing_is_installed(
    operator: OperatorProcess, res: Resources, helm4: Helm
) -> None:
    res.apply(memcached("badwin", 1, {WINDOWS_ANNOTATION: "61 * * * * 1h"}))
    stalled = res.wait_condition(MEMCACHED, "badwin", "Stalled", timeout=60)
    assert stalled["reason"] == "InvalidMaintenanceWindow", stalled
    assert (
        WINDOWS_ANNOTATION in stalled["message"] and "'61 * * * *' is not a valid cron" in stalled["message"]
    )
    res.wait_event("badwin", "InvalidMaintenanceWindow")
    assert "badwin" not in releases(helm4, res.ns)
    # Fixed: installed at once (an install never waits for a window).
    res.cluster.kubectl(
        "annotate", "--overwrite", MEMCACHED, "badwin", "-n", res.ns, f"{WINDOWS_ANNOTATION}=0 3 * * 6 1h"
    )
    res.wait_condition(MEMCACHED, "badwin", "Ready", timeout=60)
    assert "badwin" in releases(helm4, res.ns)
    res.delete(MEMCACHED, "badwin")
