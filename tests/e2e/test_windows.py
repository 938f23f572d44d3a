"""Maintenance windows on the local control plane: a change outside the window waits (the running
release untouched, drift still corrected) and is applied when the window opens; the override
annotation applies one change at once; an unreadable window is a precise stall."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from helm_operator.core.naming import WINDOW_OVERRIDE_ANNOTATION, WINDOWS_ANNOTATION

from .conftest import Helm, custom, releases
from .operator import OperatorProcess, Resources, eventually

MEMCACHED = "memcacheds.cache.example.com"
OPEN_FOR = 15  # seconds: the window opens at every minute's start, in a zone with a half-hour offset
WINDOW = f"* * * * * {OPEN_FOR}s Asia/Kolkata"


def memcached(name: str, size: int, annotations: dict[str, str]) -> dict[str, Any]:
    doc = custom("cache.example.com/v1alpha1", "Memcached", name, {"size": size})
    doc["metadata"]["annotations"] = annotations
    return doc


def outside_the_window(room: float = 20.0) -> None:
    """Wait until the window is closed with at least ``room`` seconds before it opens again."""
    while not (OPEN_FOR + 2 <= dt.datetime.now(dt.UTC).second <= 60 - room):
        time.sleep(0.5)


def revision(helm: Helm, ns: str, name: str) -> int:
    return int(releases(helm, ns)[name]["revision"])


def updated(helm: Helm, ns: str, name: str) -> dt.datetime:
    """When Helm wrote the release's latest revision (``helm list``: "2026-11-27 00:01:00.48 +0000 UTC")."""
    day, clock, offset = releases(helm, ns)[name]["updated"].split()[:3]
    return dt.datetime.strptime(f"{day} {clock[:15]} {offset}", "%Y-%m-%d %H:%M:%S.%f %z")


def replicas(res: Resources, name: str) -> int:
    return int((res.get("deployment", name) or {})["spec"]["replicas"])


def test_a_change_outside_the_window_waits_for_it_drift_is_corrected_meanwhile_and_an_override_applies_once(
    operator: OperatorProcess, res: Resources, helm4: Helm
) -> None:
    own = {WINDOWS_ANNOTATION: WINDOW}
    outside_the_window()
    res.apply(memcached("win", 1, own))  # a first install never waits
    res.wait_condition(MEMCACHED, "win", "Ready", timeout=60)
    assert revision(helm4, res.ns, "win") == 1

    outside_the_window(room=30)
    res.apply(memcached("win", 2, own))
    ready = res.wait_condition(MEMCACHED, "win", "Ready", timeout=30)
    # Ready tells the truth about what runs: revision 1, healthy; the change waits.
    assert ready["reason"] == "UpgradePending" and "revision 1" in ready["message"], ready
    pending = res.condition(MEMCACHED, "win", "UpgradePending")
    assert pending["status"] == "True" and pending["reason"] == "OutsideMaintenanceWindow", pending
    status = (res.get(MEMCACHED, "win") or {})["status"]
    opens = dt.datetime.fromisoformat(status["maintenance"]["nextWindow"].replace("Z", "+00:00"))
    assert opens.second == 0 and 0 < (opens - dt.datetime.now(dt.UTC)).total_seconds() <= 60, opens
    assert (
        status["maintenance"]["nextWindow"] in pending["message"]
        and WINDOW_OVERRIDE_ANNOTATION in pending["message"]
    )
    assert any(e["reason"] == "UpgradePending" for e in res.events("win"))
    assert revision(helm4, res.ns, "win") == 1 and replicas(res, "win") == 1

    # Drift correction goes on while the change waits: a hand-made scale is put back to the running release's.
    res.cluster.kubectl("scale", "deployment", "win", "-n", res.ns, "--replicas=3")
    eventually(lambda: replicas(res, "win") == 1, timeout=30, what="drift corrected while the change waits")
    assert revision(helm4, res.ns, "win") == 1, "no upgrade before the window"

    # The window opens: the change is applied then (not before).
    eventually(
        lambda: revision(helm4, res.ns, "win") == 2, timeout=90, what="the upgrade at the window's opening"
    )
    applied = updated(helm4, res.ns, "win")
    assert opens <= applied < opens + dt.timedelta(seconds=OPEN_FOR), (
        "applied in the window",
        applied,
        opens,
    )
    res.wait_condition(MEMCACHED, "win", "UpgradePending", status="False", timeout=30)
    assert res.wait_condition(MEMCACHED, "win", "Ready", timeout=30)["reason"] != "UpgradePending"
    assert replicas(res, "win") == 2

    # Outside the window again: an override applies the next change at once, and only that one.
    outside_the_window()
    res.apply(memcached("win", 3, own))
    res.wait_condition(MEMCACHED, "win", "UpgradePending", timeout=30)
    res.cluster.kubectl("annotate", MEMCACHED, "win", "-n", res.ns, f"{WINDOW_OVERRIDE_ANNOTATION}=change-1")
    eventually(lambda: revision(helm4, res.ns, "win") == 3, timeout=30, what="the overridden change applied")
    assert updated(helm4, res.ns, "win").second > OPEN_FOR, "applied by the override, not by the window"
    # The Event comes with the action's outcome, after Helm has stored the revision.
    overridden = eventually(
        lambda: [e for e in res.events("win") if e["reason"] == "WindowOverridden"],
        timeout=30,
        what="the WindowOverridden Event",
    )
    assert "change-1" in overridden[0]["message"], overridden
    record = eventually(
        lambda: ((res.get(MEMCACHED, "win") or {})["status"].get("maintenance") or {}).get("lastOverride"),
        timeout=30,
        what="the override recorded",
    )
    assert record["value"] == "change-1", record

    outside_the_window(room=25)
    doc = memcached("win", 4, {**own, WINDOW_OVERRIDE_ANNOTATION: "change-1"})
    res.apply(doc)  # the same override value: already used, the change waits
    res.wait_condition(MEMCACHED, "win", "UpgradePending", timeout=30)
    time.sleep(3)
    assert revision(helm4, res.ns, "win") == 3 and replicas(res, "win") == 3
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
    assert any(e["reason"] == "InvalidMaintenanceWindow" for e in res.events("badwin"))
    assert "badwin" not in releases(helm4, res.ns)
    # Fixed: installed at once (an install never waits for a window).
    res.cluster.kubectl(
        "annotate", "--overwrite", MEMCACHED, "badwin", "-n", res.ns, f"{WINDOWS_ANNOTATION}=0 3 * * 6 1h"
    )
    res.wait_condition(MEMCACHED, "badwin", "Ready", timeout=60)
    assert "badwin" in releases(helm4, res.ns)
    res.delete(MEMCACHED, "badwin")
