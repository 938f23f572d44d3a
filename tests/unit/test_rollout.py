"""Staged rollouts, the pure part: the policy's checks, the waves' membership, the driver's steps
and what a resource may do while a rollout runs."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.cli.rollout import MEMBERS_SHOWN, describe
from helm_operator.config import rollout as config
from helm_operator.config.watches import WatchesError, load_watches
from helm_operator.core.vocabulary import Reason
from helm_operator.release.rollout import (
    FAILED,
    FAILURE_SHOWN,
    MEMBERS_LISTED,
    ROLLED_BACK,
    UPDATED,
    WAITING,
    Mark,
    Member,
    admission,
    advance,
    assign,
    fleet_digest,
    mark_of,
    member_of,
    resource_status,
    rollout_id,
)

T0 = dt.datetime(2026, 11, 27, 3, 0, tzinfo=dt.UTC)
POLICY = config.Policy(
    waves=(
        config.Wave("canary", selector={"matchLabels": {"ring": "canary"}}),
        config.Wave("half", percent=50),
        config.Wave("all", percent=100),
    ),
    min_ready_seconds=30,
    max_failures=1,
    progress_deadline=600,
)


def no_selector_problem(_: Any) -> str | None:
    return None


@pytest.mark.parametrize(
    ("raw", "where", "says"),
    [
        ({"waves": [{"percent": 150}]}, ("waves[0]", "percent"), "at most 100"),
        ({"waves": [{"percent": 0}]}, ("waves[0]", "percent"), "above 0"),
        ({"waves": [{"percent": 50}, {"percent": 20}]}, ("waves[1]", "percent"), "cumulative"),
        ({"waves": [{"name": "a"}]}, ("waves[0]",), "selector, a percent or both"),
        (
            {"waves": [{"name": "a", "percent": 5}, {"name": "a", "percent": 9}]},
            ("waves[1]", "name"),
            "earlier",
        ),
        (
            {"waves": [{"name": "rest", "percent": 5}, {"percent": 9}]},
            ("waves[0]", "name"),
            "only for a last",
        ),
        (
            {"waves": [{"percent": 5}, {"name": "rest", "percent": 90}]},
            ("waves[1]", "name"),
            "only for a last",
        ),
        ({"waves": [{"name": "a:b", "percent": 5}]}, ("waves[0]", "name"), "without ':'"),
        ({"waves": [{"percent": 5, "size": 1}]}, ("waves[0]", "size"), "unknown field"),
        ({"waves": []}, ("waves",), "non-empty"),
        ({"waves": [{"percent": 5}], "maxFailures": -1}, ("maxFailures",), "0 or more"),
        ({"waves": [{"percent": 5}], "minReadySeconds": "soon"}, ("minReadySeconds",), "duration"),
        ({"waves": [{"percent": 5}], "progressDeadline": 0}, ("progressDeadline",), "above zero"),
        ({"waves": [{"percent": 5}], "wave": 1}, ("wave",), "unknown field"),
    ],
)
def test_a_bad_policy_names_its_field(raw: dict[str, Any], where: tuple[str, ...], says: str) -> None:
    with pytest.raises(config.RolloutError) as exc:
        config.from_config(raw, no_selector_problem)
    assert exc.value.where == where and says in exc.value.message, exc.value


def test_a_policy_reads_durations_and_adds_rest_unless_a_wave_takes_all() -> None:
    p = config.from_config(
        {
            "waves": [{"name": "c", "selector": {"matchLabels": {"a": "b"}}}, {"percent": 40}],
            "minReadySeconds": "1m",
        },
        no_selector_problem,
    )
    assert p.min_ready_seconds == 60 and p.names() == ("c", "wave-2", "rest")
    assert config.from_config({"waves": [{"percent": 100}]}, no_selector_problem).names() == ("wave-1",)
    last = config.from_config(
        {"waves": [{"percent": 10}, {"name": "rest", "percent": 100}]}, no_selector_problem
    )
    assert last.names() == ("wave-1", "rest")


def test_watches_file_rejects_a_percent_over_100_with_file_entry_and_field(tmp_path: Path) -> None:
    chart = Path(__file__).parents[1] / "e2e/charts/tiny"
    path = tmp_path / "watches.yaml"
    entry = {
        "group": "a.io",
        "version": "v1",
        "kind": "A",
        "chart": str(chart),
        "rollout": {"waves": [{"percent": 101}]},
    }
    path.write_text(yaml.safe_dump([entry]))
    with pytest.raises(WatchesError, match=r"entry 0: field 'rollout.waves\[0\].percent': expected a share"):
        load_watches(path)
    entry["rollout"] = {"waves": [{"selector": {"matchLabels": {"a": 1}}}]}
    path.write_text(yaml.safe_dump([entry]))
    with pytest.raises(WatchesError, match=r"rollout.waves\[0\].selector"):
        load_watches(path)


def members(n: int, canaries: int = 0) -> list[Member]:
    return [Member(f"ns/r{i}", {"ring": "canary"} if i < canaries else {}) for i in range(n)]


def test_waves_take_selected_resources_then_exact_shares_of_the_fleet_in_a_stable_order() -> None:
    fleet = members(10, canaries=2)
    waves = assign(POLICY, fleet)
    assert [len(waves[w]) for w in ("canary", "half", "all")] == [2, 3, 5]
    assert {m.key for m in waves["canary"]} == {"ns/r0", "ns/r1"}
    again = assign(POLICY, list(reversed(fleet)))
    assert [m.key for m in again["half"]] == [m.key for m in waves["half"]], (
        "the order is the fleet's, not the listing's"
    )
    partial = config.Policy(waves=(config.Wave("first", percent=25),))
    split = assign(partial, members(8))
    assert len(split["first"]) == 2 and len(split["rest"]) == 6


def test_mark_round_trip_and_nonsense_is_no_mark() -> None:
    for mark in (
        Mark("abc", "canary"),
        Mark("abc", "early", rollback=True),
        Mark("a", "b", True, 2),
        Mark("a", "b", attempt=1),
    ):
        assert mark_of(mark.text()) == mark
    assert mark_of("abc") is None and mark_of("abc:w:later") is None and mark_of("") is None
    assert mark_of("a:b:1:2") is None


def test_fleet_digest_follows_chart_and_overrides_and_the_rollout_every_version() -> None:
    a = fleet_digest("tiny", "0.1.0", "d1", {"image": "x"})
    assert a == fleet_digest("tiny", "0.1.0", "d1", {"image": "x"})
    assert a != fleet_digest("tiny", "0.1.0", "d1", {"image": "y"}) != fleet_digest("tiny", "0.2.0", "d1", {})
    assert rollout_id([a, "b"]) == rollout_id(["b", a]) != rollout_id([a])


def step_through(
    fleet: list[Member], now: dt.datetime, status: dict[str, Any] | None = None, **spec: Any
) -> Any:
    return advance(POLICY, "R2", spec, status or {"rollout": "R1", "phase": "Complete"}, fleet, now)


def updated(fleet: list[Member], keys: set[str]) -> list[Member]:
    return [Member(m.key, m.labels, m.mark, m.key in keys or m.updated, m.failed) for m in fleet]


def test_a_new_rollout_admits_its_first_wave_only() -> None:
    fleet = members(10, canaries=2)
    step = step_through(fleet, T0)
    assert step.status["phase"] == "Progressing" and step.status["previous"] == "R1"
    assert step.marks == {"ns/r0": Mark("R2", "canary"), "ns/r1": Mark("R2", "canary")}
    assert [r for _, r, _ in step.events] == [Reason.ROLLOUT_STARTED, Reason.WAVE_STARTED]


def test_a_wave_counts_only_after_min_ready_seconds_then_the_next_is_admitted() -> None:
    fleet = members(10, canaries=2)
    st = step_through(fleet, T0).status
    fleet = updated(fleet, {"ns/r0", "ns/r1"})
    st = step_through(fleet, T0 + dt.timedelta(seconds=5), st).status
    assert st["wave"] == "canary" and st["waves"][0]["readyAt"], st
    early = step_through(fleet, T0 + dt.timedelta(seconds=20), st)
    assert not early.marks and early.status["wave"] == "canary"
    later = step_through(fleet, T0 + dt.timedelta(seconds=36), st)
    assert later.status["wave"] == "half" and len(later.marks) == 3
    assert Reason.WAVE_COMPLETED in [r for _, r, _ in later.events]


def test_a_resource_not_ready_again_restarts_the_wave_s_ready_time() -> None:
    fleet = members(4, canaries=2)
    st = step_through(updated(fleet, {"ns/r0", "ns/r1"}), T0).status
    st = step_through(updated(fleet, {"ns/r0"}), T0 + dt.timedelta(seconds=10), st).status
    assert "readyAt" not in st["waves"][0]
    st2 = step_through(updated(fleet, {"ns/r0", "ns/r1"}), T0 + dt.timedelta(seconds=31), st).status
    assert st2["wave"] == "canary", "Ready again for 0 s, not 31 s"


def test_more_failures_than_allowed_halt_and_mark_the_wave_for_rollback_others_untouched() -> None:
    fleet = members(10, canaries=2)
    st = step_through(fleet, T0).status
    one = [
        Member(m.key, m.labels, Mark("R2", "canary"), False, "UpgradeFailed: x" if m.key == "ns/r0" else None)
        for m in fleet
    ]
    step = step_through(one, T0 + dt.timedelta(seconds=5), st)
    assert step.status["phase"] == "Progressing", "one failure is within maxFailures=1"
    two = [
        Member(m.key, m.labels, m.mark, False, "UpgradeFailed: x" if m.key in ("ns/r0", "ns/r1") else None)
        for m in one
    ]
    step = step_through(two, T0 + dt.timedelta(seconds=6), step.status)
    assert step.status["phase"] == "Halted" and step.status["wave"] == "canary"
    assert step.marks == {"ns/r0": Mark("R2", "canary", True), "ns/r1": Mark("R2", "canary", True)}
    assert [f["resource"] for f in step.status["failures"]] == ["ns/r0", "ns/r1"]
    assert step.events[-1][1] == Reason.ROLLOUT_HALTED
    still = step_through(two, T0 + dt.timedelta(seconds=60), step.status)
    assert still.status["phase"] == "Halted" and not still.marks, "a halted rollout admits nothing"
    retried = step_through(two, T0 + dt.timedelta(seconds=61), still.status, retries=1)
    assert retried.status["phase"] == "Progressing", "failures of the try before do not count"
    assert retried.marks["ns/r0"] == Mark("R2", "canary", attempt=1)


def test_a_resource_past_the_progress_deadline_is_a_failure() -> None:
    fleet = members(3, canaries=3)
    st = step_through(fleet, T0).status
    late = step_through(updated(fleet, {"ns/r0"}), T0 + dt.timedelta(seconds=601), st)
    assert late.status["phase"] == "Halted" and len(late.status["failures"]) == 2
    assert "within 600s" in late.status["failures"][0]["message"]


def test_pause_abort_and_completion() -> None:
    fleet = members(4, canaries=1)
    paused = step_through(fleet, T0, paused=True)
    assert paused.status["phase"] == "Paused" and not paused.marks
    resumed = step_through(fleet, T0 + dt.timedelta(seconds=1), paused.status)
    assert resumed.status["phase"] == "Progressing" and resumed.marks
    half = updated(fleet, {"ns/r0"})
    aborted = step_through(half, T0 + dt.timedelta(seconds=2), resumed.status, abort="R2")
    assert aborted.status["phase"] == "Aborted" and not aborted.marks
    assert aborted.wake == ["ns/r1", "ns/r2", "ns/r3"], "who waited is told at once"
    again = step_through(half, T0, aborted.status, abort="R1")
    assert again.status["phase"] == "Aborted" and not again.wake, "woken once"
    every = updated(fleet, {m.key for m in fleet})
    st = step_through(every, T0).status
    for s in range(1, 5):
        st = step_through(every, T0 + dt.timedelta(seconds=31 * s), st).status
    assert st["phase"] == "Complete" and st["updated"] == "4/4", st


def test_admission_of_one_resource() -> None:
    go = admission(True, "old", "new", "R2", Mark("R2", "canary"), None)
    assert go.proceed and not go.rollback
    wait = admission(True, "old", "new", "R2", None, "Progressing")
    assert not wait.proceed and "waits for its wave" in (wait.waiting or "")
    assert admission(True, "old", "new", "R2", Mark("R1", "canary"), "Progressing").waiting
    assert admission(True, "new", "new", "R2", None, None).proceed, "its own spec change: not staged"
    assert admission(False, "old", "new", "R2", None, None).proceed, "not an upgrade (install, drift)"
    assert admission(True, None, "new", "R2", None, "Complete").proceed, "a latecomer after completion"
    assert "aborted" in (admission(True, "old", "new", "R2", None, "Aborted").waiting or "")
    assert "not started" in (admission(True, "old", "new", "R2", None, None).waiting or "")
    back = admission(False, "new", "new", "R2", Mark("R2", "early", True), "Halted")
    assert back.rollback and not back.proceed
    stays = admission(True, "old", "new", "R2", Mark("R2", "early", True), "Halted")
    assert not stays.proceed and not stays.rollback and "early failed" in (stays.waiting or "")


def test_resource_status_and_what_the_driver_reads_of_it() -> None:
    assert resource_status("R", "n", "n", None, "ready", False)["state"] == UPDATED
    assert resource_status("R", "n", "o", None, "ready", True)["state"] == WAITING
    assert resource_status("R", "n", "o", Mark("R", "w"), "stalled", False)["state"] == FAILED
    assert resource_status("R", "n", "o", Mark("R", "w", True), "ready", True)["state"] == ROLLED_BACK
    body = {
        "metadata": {"name": "a", "namespace": "ns", "generation": 2, "labels": {"x": "y"}},
        "status": {
            "observedGeneration": 2,
            "rollout": resource_status("R", "n", "n", Mark("R", "w"), "ready", False),
            "conditions": [{"type": "Ready", "status": "True", "reason": "UpgradeSucceeded", "message": ""}],
        },
    }
    m = member_of(body, "R", Mark("R", "w"))
    assert m.key == "ns/a" and m.updated and m.failed is None and m.labels == {"x": "y"}
    failed = {
        **body,
        "status": {
            **body["status"],
            "rollout": resource_status("R", "n", "o", Mark("R", "w"), "failed", False),
        },
    }
    assert member_of(failed, "R", Mark("R", "w")).failed is not None
    long = copy.deepcopy(failed)
    ready = next(c for c in long["status"]["conditions"] if c["type"] == "Ready")
    ready["message"] = "Error: UPGRADE FAILED: " + "x" * 400
    clipped = member_of(long, "R", Mark("R", "w")).failed
    assert clipped is not None and len(clipped) == FAILURE_SHOWN and clipped.endswith("…"), clipped
    assert member_of(failed, "R", Mark("R", "w", attempt=1)).failed is None, "reported under the try before"
    assert not member_of(body, "R3", None).updated, "updated for another rollout"
    body["metadata"]["generation"] = 3
    assert not member_of(body, "R", None).updated, "the status is older than the spec"
    # Its own spec edit (generation 3) is held by a window: the turn for 3 ran (Reconciling speaks
    # of it) while Ready and observedGeneration stay on 2's release, which runs the rollout's inputs.
    held = [
        {"type": "Ready", "status": "True", "reason": "UpgradePending", "observedGeneration": 2},
        {"type": "Reconciling", "status": "True", "reason": "UpgradePending", "observedGeneration": 3},
    ]
    body["status"] = {**body["status"], "conditions": held}
    assert member_of(body, "R", Mark("R", "w")).updated, "a held spec edit is not a failed wave"


def test_the_pause_is_between_waves_never_before_the_first() -> None:
    paused = config.Policy(waves=(config.Wave("a", percent=50), config.Wave("b", percent=100)), pause=600)
    fleet = members(4)
    first = advance(paused, "R2", {}, {"rollout": "R1", "phase": "Complete"}, fleet, T0)
    assert len(first.marks) == 2 and first.status["waves"][0]["admittedAt"], first.status
    a_done = updated(fleet, set(first.marks))
    done_a = advance(paused, "R2", {}, first.status, a_done, T0 + dt.timedelta(seconds=1))
    assert done_a.status["wave"] == "b" and "pause between waves" in done_a.status["message"]
    assert not done_a.marks, "wave b waits out the pause"
    later = advance(paused, "R2", {}, done_a.status, a_done, T0 + dt.timedelta(seconds=602))
    assert later.status["wave"] == "b" and len(later.marks) == 2, later.status
    # A wave with nothing to move (every resource of it already updated) is not paused for.
    every = updated(fleet, {m.key for m in fleet})
    at_once = advance(paused, "R2", {}, first.status, every, T0 + dt.timedelta(seconds=1))
    assert at_once.status["phase"] == "Complete", at_once.status


def test_retries_asked_for_in_an_earlier_rollout_do_not_retry_the_next_one() -> None:
    fleet = members(2, canaries=2)
    step = step_through(fleet, T0, retries=2)
    assert step.status["retries"] == 2 and step.marks["ns/r0"] == Mark("R2", "canary", attempt=2)
    failing = [
        Member(m.key, m.labels, Mark("R2", "canary", attempt=2), False, "UpgradeFailed: x") for m in fleet
    ]
    halted = step_through(failing, T0 + dt.timedelta(seconds=1), step.status, retries=2)
    assert halted.status["phase"] == "Halted"
    still = step_through(failing, T0 + dt.timedelta(seconds=30), halted.status, retries=2)
    assert still.status["phase"] == "Halted", "nobody asked for a retry in this rollout"


def test_a_halted_wave_keeps_counting_its_failures_after_the_rollback() -> None:
    fleet = members(2, canaries=2)
    st = step_through(fleet, T0).status
    failing = [Member(m.key, m.labels, Mark("R2", "canary"), False, "UpgradeFailed: x") for m in fleet]
    st = step_through(failing, T0 + dt.timedelta(seconds=1), st).status
    rolled_back = [Member(m.key, m.labels, Mark("R2", "canary", rollback=True)) for m in fleet]
    after = step_through(rolled_back, T0 + dt.timedelta(seconds=5), st).status
    assert after["phase"] == "Halted" and after["waves"][0]["failed"] == 2, after


def test_failures_stay_counted_after_a_retry_and_after_completion() -> None:
    fleet = members(2, canaries=2)
    st = step_through(fleet, T0).status
    failing = [Member(m.key, m.labels, Mark("R2", "canary"), False, "UpgradeFailed: x") for m in fleet]
    st = step_through(failing, T0 + dt.timedelta(seconds=1), st).status
    assert st["phase"] == "Halted" and st["waves"][0]["failed"] == 2
    retried = [Member(m.key, m.labels, Mark("R2", "canary", attempt=1)) for m in fleet]
    st = step_through(retried, T0 + dt.timedelta(seconds=2), st, retries=1).status
    assert st["phase"] == "Progressing" and st["waves"][0]["failed"] == 2, (
        "the try before failed all the same"
    )
    every = updated(retried, {m.key for m in fleet})
    for s in range(1, 6):
        st = step_through(every, T0 + dt.timedelta(seconds=2 + 31 * s), st, retries=1).status
    assert st["phase"] == "Complete" and st["waves"][0]["failed"] == 2, st


def test_a_wave_names_who_holds_it_up_and_what_each_waits_for() -> None:
    fleet = members(3, canaries=3)
    st = step_through(fleet, T0).status
    waits = {"ns/r1": "UpgradePending", "ns/r2": "AwaitingApproval"}
    held = [
        Member(m.key, m.labels, Mark("R2", "canary"), m.key == "ns/r0", None, waits.get(m.key)) for m in fleet
    ]
    message = step_through(held, T0 + dt.timedelta(seconds=5), st).status["message"]
    assert message == (
        "wave canary: 1/3 updated and Ready; "
        "not updated yet: ns/r1 (UpgradePending), ns/r2 (AwaitingApproval)"
    )
    body = {
        "metadata": {"name": "r1", "namespace": "ns", "generation": 3},
        "status": {"conditions": [{"type": "Reconciling", "status": "True", "reason": "UpgradePending"}]},
    }
    assert member_of(body, "R2", Mark("R2", "canary")).waits == "UpgradePending"


def test_after_an_abort_a_resource_that_did_not_move_takes_only_a_change_of_its_own() -> None:
    stays = admission(True, "old", "new", "R2", None, "Aborted")
    assert not stays.proceed and "was aborted" in (stays.waiting or "")
    assert admission(True, "old", "new", "R2", None, "Aborted", own_change=True).proceed
    assert not admission(True, "old", "new", "R2", None, "Progressing", own_change=True).proceed, (
        "while the rollout runs, its own change waits with the fleet's inputs for its wave"
    )


def test_a_rollout_that_starts_paused_says_why() -> None:
    step = step_through(members(2), T0, paused=True)
    started = next(m for _, r, m in step.events if r == Reason.ROLLOUT_STARTED)
    assert started == "rollout R2 started paused (spec.paused is set: resume to go on)"
    assert step.status["phase"] == "Paused"


def test_every_wave_lists_its_members_before_it_starts_and_rollout_status_names_them() -> None:
    fleet = members(10, canaries=2)
    st = step_through(fleet, T0).status
    waves = assign(POLICY, fleet)
    listed = {w["name"]: w["members"] for w in st["waves"]}
    assert listed == {name: sorted(m.key for m in group) for name, group in waves.items()}
    assert "admittedAt" not in st["waves"][1] and len(listed["half"]) == 3, "known before it starts"
    text = describe({"metadata": {"name": "tinies.example.com"}, "status": st})
    assert "    members: ns/r0, ns/r1" in text
    assert f"    members: {', '.join(listed['all'])}" in text

    big = step_through(members(130), T0).status
    rest = next(w for w in big["waves"] if w["name"] == "all")
    assert rest["resources"] == 65 and len(rest["members"]) == MEMBERS_LISTED
    line = next(x for x in describe({"metadata": {"name": "x"}, "status": big}) if "and 55 more" in x)
    assert line.count(", ") == MEMBERS_SHOWN - 1, line
