from __future__ import annotations

from helm_operator.core.masking import mask
from helm_operator.release.dependencies import Dependency, why_not_ready
from helm_operator.release.outcome import Outcome, Remediation
from helm_operator.release.record import StoredRelease
from helm_operator.release.status import HISTORY_MAX, progress_patch, status_patch


def cond(patch: dict, ctype: str) -> dict:
    return next(c for c in patch["conditions"] if c["type"] == ctype)


REL = StoredRelease(
    "r", "ns", 3, "deployed", owner="o", digest="d", chart_name="c", chart_version="1.0", app_version="2"
)


def test_ready_outcome_sets_kstatus_conditions_and_release_record() -> None:
    p = status_patch(
        {},
        Outcome("ready", "InstallSucceeded", "ok", action="install", release=REL, digest="d"),
        generation=4,
        now=0,
    )
    assert p["observedGeneration"] == 4
    assert [(c["type"], c["status"]) for c in p["conditions"]] == [
        ("Ready", "True"),
        ("Reconciling", "False"),
        ("Stalled", "False"),
        ("Released", "True"),
    ]
    assert all(c["observedGeneration"] == 4 for c in p["conditions"])
    assert p["release"] == {
        "name": "r",
        "namespace": "ns",
        "revision": 3,
        "status": "deployed",
        "chart": "c",
        "chartVersion": "1.0",
        "chartRef": "c-1.0",
        "appVersion": "2",
        "digest": "d",
        "lastAction": "install",
        "lastActionTime": "1970-01-01T00:00:00Z",
        "generation": 4,  # the spec the revision was made from
    }
    assert p["history"][0]["action"] == "install" and p["history"][0]["result"] == "Succeeded"


def test_failures_are_counted_per_digest_and_cleared_on_success() -> None:
    rolled_back = Remediation("rollback", True, "rolled back to the previous revision")
    failed = Outcome(
        "failed", "UpgradeFailed", "boom", action="upgrade", digest="d2", remediation=rolled_back
    )
    p1 = status_patch({}, failed, 1, 10)
    assert p1["lastAttempt"]["failures"] == 1
    assert cond(p1, "Ready")["status"] == "False" and cond(p1, "Reconciling")["status"] == "True"
    assert cond(p1, "Remediated")["status"] == "True" and cond(p1, "Remediated")["reason"] == "RolledBack"
    p2 = status_patch(p1, failed, 1, 20)
    assert p2["lastAttempt"]["failures"] == 2
    p3 = status_patch(p2, Outcome("failed", "UpgradeFailed", "x", action="upgrade", digest="d3"), 2, 30)
    assert p3["lastAttempt"]["failures"] == 1  # new values: a fresh count
    ok = status_patch(p3, Outcome("ready", "UpgradeSucceeded", "ok", action="upgrade", release=REL), 2, 40)
    assert ok["lastAttempt"] is None
    assert cond(ok, "Remediated")["status"] == "False"


def test_a_failed_remediation_is_never_reported_as_a_success() -> None:
    for kind, ok, reason in (
        ("rollback", False, "RollbackFailed"),
        ("uninstall", False, "CleanupFailed"),
        ("uninstall", True, "CleanedUp"),
    ):
        remediation = Remediation(kind, ok, "rolled back? no: rollback failed: timed out")  # type: ignore[arg-type]
        out = Outcome("failed", "InstallFailed", "x", action="install", digest="d", remediation=remediation)
        c = cond(status_patch({}, out, 1, 0), "Remediated")
        assert (c["status"], c["reason"]) == ("True" if ok else "False", reason)


def test_progress_says_reconciling_and_ready_unknown_for_the_new_generation() -> None:
    ready = status_patch({}, Outcome("ready", "InstallSucceeded", "ok", action="install", release=REL), 1, 0)
    p = progress_patch(ready, "upgrade", "chart or values changed", 2, 5)
    assert (cond(p, "Ready")["status"], cond(p, "Ready")["reason"]) == ("Unknown", "Upgrading")
    assert cond(p, "Reconciling")["status"] == "True" and cond(p, "Reconciling")["observedGeneration"] == 2
    assert cond(p, "Stalled")["status"] == "False"
    assert cond(p, "Released") == cond(ready, "Released")  # what is deployed has not changed yet


def test_stalled_outcome() -> None:
    p = status_patch({}, Outcome("stalled", "InvalidValues", "spec.replicas: bad"), 2, 0)
    stalled = cond(p, "Stalled")
    assert (stalled["status"], stalled["reason"], stalled["message"]) == (
        "True",
        "InvalidValues",
        "spec.replicas: bad",
    )
    assert cond(p, "Ready")["status"] == "False" and cond(p, "Reconciling")["status"] == "False"
    assert "history" not in p and "Released" not in {c["type"] for c in p["conditions"]}


def test_transition_time_kept_while_status_unchanged() -> None:
    first = status_patch({}, Outcome("ready", "ReconciliationSucceeded", "ok"), 1, 100)
    again = status_patch(first, Outcome("ready", "ReconciliationSucceeded", "ok"), 1, 500)
    assert cond(again, "Ready")["lastTransitionTime"] == cond(first, "Ready")["lastTransitionTime"]
    flipped = status_patch(again, Outcome("stalled", "X", "y"), 2, 900)
    assert cond(flipped, "Ready")["lastTransitionTime"] != cond(first, "Ready")["lastTransitionTime"]


def test_history_is_bounded() -> None:
    current: dict = {}
    for i in range(HISTORY_MAX + 3):
        current |= status_patch(
            current,
            Outcome("ready", "UpgradeSucceeded", "ok", action="upgrade", release=REL, digest=str(i)),
            1,
            i,
        )
    assert len(current["history"]) == HISTORY_MAX
    assert current["history"][0]["digest"] == str(HISTORY_MAX + 2)


def test_mask_hides_secret_values() -> None:
    values = {"config": "password=88888888", "db": {"adminPassword": "hunter2"}, "replicas": 3}
    msg = mask("failed: password=88888888 and hunter2 with 3 replicas", values)
    assert "88888888" not in msg and "hunter2" not in msg and "3 replicas" in msg


def test_next_attempts() -> None:
    from helm_operator.release.attempts import Attempts, next_attempts

    failed = Outcome("failed", "UpgradeFailed", "x", action="upgrade", digest="d")
    a1 = next_attempts(Attempts(), failed, 10.7)
    assert (a1.digest, a1.failures, a1.last_attempt, a1.reason) == ("d", 1, 10.0, "UpgradeFailed")
    assert next_attempts(a1, failed, 20).failures == 2
    render = Outcome("stalled", "RenderFailed", "x", action="install", digest="d", permanent=True)
    assert next_attempts(a1, render, 30).permanent
    assert next_attempts(a1, Outcome("progressing", "RetryPending", "wait"), 30) == a1
    assert next_attempts(a1, Outcome("ready", "UpgradeSucceeded", "ok"), 30) == Attempts()


def test_a_condition_set_twice_in_one_reconcile_keeps_its_transition_time() -> None:
    from helm_operator.core.conditions import keep_transitions, merge_conditions

    before = merge_conditions([], [("Ready", False, "WorkloadsNotReady", "x")], 1, 100)
    interim = merge_conditions(before, [("Ready", True, "ReconciliationSucceeded", "ok")], 1, 200)
    final = merge_conditions(interim, [("Ready", False, "WorkloadsNotReady", "x")], 1, 200)
    assert keep_transitions(before, final)[0]["lastTransitionTime"] == before[0]["lastTransitionTime"]
    flipped = keep_transitions(before, interim)
    assert (
        flipped[0]["lastTransitionTime"]
        == interim[0]["lastTransitionTime"]
        != before[0]["lastTransitionTime"]
    )


def test_failures_are_counted_per_digest_and_context() -> None:
    from helm_operator.release.attempts import (
        Attempts,
        attempts_from_status,
        attempts_to_status,
        next_attempts,
    )

    failed = Outcome("failed", "UpgradeFailed", "x", action="upgrade", digest="d")
    a1 = next_attempts(Attempts(), failed, 10, context="c1")
    assert next_attempts(a1, failed, 20, context="c1").failures == 2
    assert next_attempts(a1, failed, 20, context="c2").failures == 1  # another context starts over
    assert attempts_from_status({"lastAttempt": attempts_to_status(a1)}) == a1


def test_a_held_change_reads_as_in_progress_while_ready_speaks_of_the_running_release() -> None:
    """A gate holds generation 5's change (a window, an approval, a rollout's wave): Ready stays
    True for generation 4, the one the release runs, and so does observedGeneration — kstatus reads
    in progress and ``kubectl wait --for=condition=Ready`` (which compares the condition's
    observedGeneration with the generation) keeps waiting; Reconciling=True says why, for 5."""
    applied = status_patch(
        {}, Outcome("ready", "UpgradeSucceeded", "upgraded", action="upgrade", release=REL), 4, 0
    )
    assert applied["observedGeneration"] == 4
    said = "release r runs revision 3; the change waits for the window opening at 02:00"
    held = status_patch(applied, Outcome("ready", "UpgradePending", said, release=REL, held=True), 5, 10)
    assert held["observedGeneration"] == 4
    ready, reconciling = cond(held, "Ready"), cond(held, "Reconciling")
    assert (ready["status"], ready["observedGeneration"], ready["reason"]) == ("True", 4, "UpgradePending")
    assert (reconciling["status"], reconciling["observedGeneration"]) == ("True", 5)
    assert reconciling["message"] == said
    released = cond({**applied, **held}, "Released")  # the last Helm action's, not the gate's
    assert (released["reason"], released["observedGeneration"]) == ("UpgradeSucceeded", 4), released
    body = {"metadata": {"generation": 5}, "status": {**applied, **held}}
    assert why_not_ready(Dependency(("g", "K", "ns", "r")), body) is not None  # not Current

    # Held again on the next look: still generation 4's. Applied at last: generation 5 is.
    again = status_patch(
        {**applied, **held}, Outcome("ready", "UpgradePending", said, release=REL, held=True), 5, 20
    )
    assert again["observedGeneration"] == 4 and cond(again, "Ready")["observedGeneration"] == 4
    done = status_patch(
        {**applied, **again},
        Outcome("ready", "UpgradeSucceeded", "upgraded", action="upgrade", release=REL),
        5,
        30,
    )
    assert done["observedGeneration"] == 5
    assert [(c["type"], c["status"], c["observedGeneration"]) for c in done["conditions"]][:2] == [
        ("Ready", "True", 5),
        ("Reconciling", "False", 5),
    ]


def test_a_held_first_install_is_not_ready() -> None:
    """Nothing runs yet (an install that waits for approval): Ready=False, in progress."""
    held = status_patch({}, Outcome("progressing", "AwaitingApproval", "plan p1 waits", held=True), 1, 0)
    assert cond(held, "Ready")["status"] == "False" and cond(held, "Reconciling")["status"] == "True"


def test_a_held_change_speaks_of_the_generation_the_revision_was_made_from() -> None:
    """Not of the last generation looked at: generation 4 waited for a dependency and then failed
    (both written for 4), and is now held by a window: Ready speaks of 3, the one revision 3 was
    made from, and a wait for Ready keeps waiting."""
    made = status_patch(
        {}, Outcome("ready", "UpgradeSucceeded", "upgraded", action="upgrade", release=REL), 3, 0
    )
    waited = {
        **made,
        **status_patch(made, Outcome("progressing", "DependencyNotReady", "db not ready"), 4, 1),
    }
    failed = {
        **waited,
        **status_patch(waited, Outcome("failed", "UpgradeFailed", "boom", action="upgrade"), 4, 2),
    }
    assert failed["observedGeneration"] == 4 and failed["release"]["generation"] == 3
    held = status_patch(failed, Outcome("ready", "UpgradePending", "waits", release=REL, held=True), 4, 3)
    assert held["observedGeneration"] == 3 and cond(held, "Ready")["observedGeneration"] == 3
    assert held["release"]["generation"] == 3
    older = {k: v for k, v in made.items() if k != "release"}  # written before release.generation
    assert (
        status_patch(older, Outcome("ready", "UpgradePending", "w", held=True), 4, 4)["observedGeneration"]
        == 3
    )
