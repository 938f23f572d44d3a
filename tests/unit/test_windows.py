"""Maintenance windows: the time arithmetic, what is refused and where, and what waits (pure)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from helm_operator.config.charts import ChartRef
from helm_operator.config.maintenance import Maintenance, Window, WindowError
from helm_operator.config.watches import Watch, WatchesError, load_watches
from helm_operator.drift.check import mode_of
from helm_operator.release.state import Action
from helm_operator.release.windows import contribution, effective, gate, waiting_message
from helm_operator.runtime.settled import written

UTC = dt.UTC
SAT_02 = Window("0 2 * * 6", 4 * 3600, "Europe/Berlin")  # Saturdays 02:00-06:00, Berlin time


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> dt.datetime:
    return dt.datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def test_a_window_is_open_from_its_cron_for_its_duration_in_its_zone() -> None:
    # 2026-11-28 is a Saturday; Berlin is UTC+1 in November: the window is 01:00-05:00 UTC.
    assert SAT_02.opened(at(2026, 11, 28, 0, 59)) is None
    opened = SAT_02.opened(at(2026, 11, 28, 1, 0))
    assert opened is not None and opened.astimezone(UTC) == at(2026, 11, 28, 1, 0)
    assert SAT_02.opened(at(2026, 11, 28, 4, 59, 59)) is not None
    assert SAT_02.opened(at(2026, 11, 28, 5, 0)) is None  # closed at start + duration
    assert SAT_02.next_opening(at(2026, 11, 26, 12)).astimezone(UTC) == at(2026, 11, 28, 1, 0)
    # In summer Berlin is UTC+2: the same window opens an hour earlier in UTC.
    assert SAT_02.next_opening(at(2026, 7, 1)).astimezone(UTC) == at(2026, 7, 4, 0, 0)


def test_no_windows_is_always_open_and_the_earliest_window_opens_next() -> None:
    assert Maintenance().open_at(at(2026, 1, 1)) and Maintenance().next_opening(at(2026, 1, 1)) is None
    daily = Window("30 23 * * *", 1800)
    both = Maintenance((SAT_02, daily))
    assert not both.open_at(at(2026, 11, 26, 12))
    assert both.next_opening(at(2026, 11, 26, 12)) == at(2026, 11, 26, 23, 30)
    assert both.open_at(at(2026, 11, 26, 23, 45))


@pytest.mark.parametrize(
    ("raw", "where", "words"),
    [
        (
            {"windows": [{"schedule": "0 2 * * * *", "duration": "1h"}]},
            "windows[0].schedule",
            "has 6 field(s)",
        ),
        (
            {"windows": [{"schedule": "61 * * * *", "duration": "1h"}]},
            "windows[0].schedule",
            "not a valid cron",
        ),
        (
            {"windows": [{"schedule": "0 0 30 2 *", "duration": "1h"}]},
            "windows[0].schedule",
            "not a valid cron",
        ),
        ({"windows": [{"schedule": "0 2 * * *", "duration": "soon"}]}, "windows[0].duration", "30m or 4h"),
        (
            {"windows": [{"schedule": "0 2 * * *", "duration": 0}]},
            "windows[0].duration",
            "open for some time",
        ),
        (
            {"windows": [{"schedule": "0 2 * * *", "duration": "1h", "timeZone": "Mars/Olympus"}]},
            "windows[0].timeZone",
            "not a known time zone",
        ),
        (
            {"windows": [{"schedule": "0 2 * * *", "duration": "1h", "zone": "UTC"}]},
            "windows[0].zone",
            "unknown",
        ),
        ({"windows": []}, "windows", "non-empty list"),
        (
            {"windows": [{"schedule": "0 2 * * *", "duration": "1h"}], "driftOutsideWindows": "no"},
            "drift",
            "correct",
        ),
    ],
)
def test_a_bad_window_in_watches_yaml_names_its_field(
    raw: object, where: str, words: str, tmp_path: Path
) -> None:
    chart = tmp_path / "chart"
    chart.mkdir()
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: c\nversion: 0.1.0\n")
    (tmp_path / "watches.yaml").write_text(
        "- {group: example.com, version: v1, kind: Thing, chart: chart, maintenance: "
        + repr_yaml(raw)
        + "}\n"
    )
    with pytest.raises(WatchesError) as err:
        load_watches(tmp_path / "watches.yaml", env={})
    text = str(err.value)
    assert f"field 'maintenance.{where}" in text and words in text, text


def repr_yaml(raw: object) -> str:
    return json.dumps(raw)  # JSON is YAML


def test_watches_yaml_windows_are_loaded(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    chart.mkdir()
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: c\nversion: 0.1.0\n")
    (tmp_path / "watches.yaml").write_text(
        "- group: example.com\n  version: v1\n  kind: Thing\n  chart: chart\n  maintenance:\n"
        "    windows: [{schedule: '0 2 * * 6', duration: 4h, timeZone: Europe/Berlin}]\n"
        "    driftOutsideWindows: report\n"
    )
    (watch,) = load_watches(tmp_path / "watches.yaml", env={})
    assert watch.maintenance == Maintenance((SAT_02,), "report")
    plain = Watch("example.com", "v1", "Thing", watch.chart)
    assert not plain.maintenance.limited


def test_a_resource_replaces_its_watchs_windows_with_its_annotation() -> None:
    base = Maintenance((SAT_02,), "report")
    annotations = {
        "helm-operator.io/maintenance-windows": "0 3 * * *  30m; 0 12 * * 1-5 1h30m America/New_York"
    }
    own = effective(base, annotations)
    assert own.windows == (Window("0 3 * * *", 1800), Window("0 12 * * 1-5", 5400, "America/New_York"))
    assert own.drift == "report"  # the watch's drift rule stays
    assert effective(base, {"helm-operator.io/maintenance-windows": "always"}) == Maintenance((), "report")
    assert effective(base, {}) is base


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("0 3 * * *", "expected '<5-field cron> <duration> [<time zone>]'"),
        ("0 3 * * * 30m; nonsense", "window 2 'nonsense'"),
        ("0 25 * * * 1h", "window 1 '0 25 * * * 1h'.schedule"),
        ("0 3 * * * 1h Nowhere/Town", "timeZone"),
        ("0 3 * * * -1h", "duration"),
        ("0 0 2 * * * 1h", "its cron '0 0 2 * * *' has 6 fields (seconds are not supported)"),
    ],
)
def test_a_bad_annotation_says_which_window_and_why(text: str, words: str) -> None:
    with pytest.raises(WindowError) as err:
        effective(Maintenance(), {"helm-operator.io/maintenance-windows": text})
    assert words in str(err.value), str(err.value)


OUTSIDE = at(2026, 11, 26, 12)  # a Thursday: SAT_02 is closed
INSIDE = at(2026, 11, 28, 2)


def test_only_an_upgrade_waits_for_a_window() -> None:
    windows = Maintenance((SAT_02,))
    waits = gate(Action.UPGRADE, windows, OUTSIDE, {}, {})
    assert (
        not waits.proceed and waits.opens is not None and waits.opens.astimezone(UTC) == at(2026, 11, 28, 1)
    )
    assert gate(Action.UPGRADE, windows, INSIDE, {}, {}).proceed
    for action in (Action.INSTALL, Action.REINSTALL, Action.ROLLBACK, Action.UNLOCK, Action.CORRECT_DRIFT):
        assert gate(action, windows, OUTSIDE, {}, {}).proceed, action
    assert gate(Action.UPGRADE, Maintenance(), OUTSIDE, {}, {}).proceed  # no windows: as before


def test_an_override_lets_one_change_through_per_new_value() -> None:
    windows = Maintenance((SAT_02,))
    annotations = {"helm-operator.io/apply-outside-window": "ticket-42"}
    first = gate(Action.UPGRADE, windows, OUTSIDE, annotations, {})
    assert first.proceed and first.override == "ticket-42"
    recorded = {"maintenance": {"lastOverride": {"value": "ticket-42", "time": "2026-11-26T12:00:00Z"}}}
    assert not gate(
        Action.UPGRADE, windows, OUTSIDE, annotations, recorded
    ).proceed  # used: the next one waits
    again = {"helm-operator.io/apply-outside-window": "ticket-43"}
    assert gate(Action.UPGRADE, windows, OUTSIDE, again, recorded).override == "ticket-43"


def test_an_override_given_while_nothing_waits_is_spent_not_kept_for_a_later_change() -> None:
    windows = Maintenance((SAT_02,))
    annotations = {"helm-operator.io/apply-outside-window": "ticket-7"}
    idle = gate(Action.NOTHING, windows, OUTSIDE, annotations, {})
    assert idle.proceed and idle.spent and idle.override == "ticket-7"
    said = contribution({}, idle, "", OUTSIDE)
    assert said is not None
    status = written({}, dict(said.fields))
    assert status["maintenance"]["lastOverride"] == {
        "value": "ticket-7",
        "time": "2026-11-26T12:00:00Z",
        "applied": False,
    }
    later = gate(Action.UPGRADE, windows, OUTSIDE, annotations, status)
    assert not later.proceed, "a change made after it waits for its window"
    assert not gate(Action.NOTHING, Maintenance(), OUTSIDE, annotations, {}).spent, (
        "no windows: nothing to spend"
    )


def test_the_status_names_the_next_window_while_waiting_and_is_not_rewritten_when_nothing_changed() -> None:
    windows = Maintenance((SAT_02,))
    waits = gate(Action.UPGRADE, windows, OUTSIDE, {}, {})
    message = waiting_message(waits, "web", 3)
    assert "revision 3" in message and "2026-11-28T01:00:00Z" in message and "apply-outside-window" in message
    said = contribution({}, waits, message, OUTSIDE)
    assert said is not None
    (condition,) = said.conditions
    assert condition.type == "UpgradePending" and condition.status is True
    fields = said.fields["maintenance"]
    assert fields["nextWindow"] == "2026-11-28T01:00:00Z" and fields["pendingSince"] == "2026-11-26T12:00:00Z"
    status = written({}, dict(said.fields))
    later = contribution(status, waits, message, OUTSIDE + dt.timedelta(minutes=5))
    assert later is not None and later.fields["maintenance"] == status["maintenance"]  # pendingSince kept

    done = gate(Action.UPGRADE, windows, INSIDE, {}, status)
    cleared = contribution(status, done, "", INSIDE)
    assert cleared is not None and cleared.conditions[0].status is False
    after = written(status, dict(cleared.fields))
    assert "pendingSince" not in after["maintenance"] and "nextWindow" not in after["maintenance"]
    steady = contribution(after, gate(Action.NOTHING, windows, OUTSIDE, {}, after), "", OUTSIDE)
    assert steady is not None and steady.fields["maintenance"] == after["maintenance"]


def test_nothing_is_written_without_windows_unless_an_earlier_turn_wrote_something() -> None:
    assert contribution({}, gate(Action.UPGRADE, Maintenance(), OUTSIDE, {}, {}), "", OUTSIDE) is None
    earlier = {"maintenance": {"windows": "x"}, "conditions": []}
    removed = contribution(earlier, gate(Action.NOTHING, Maintenance(), OUTSIDE, {}, earlier), "", OUTSIDE)
    assert removed is not None and removed.conditions[0].status is False


def test_drift_is_only_reported_outside_the_windows_where_they_say_so(tmp_path: Path) -> None:
    chart = ChartRef(ref=str(tmp_path))
    report = Watch("example.com", "v1", "Thing", chart, maintenance=Maintenance((SAT_02,), "report"))
    correct = Watch("example.com", "v1", "Thing", chart, maintenance=Maintenance((SAT_02,), "correct"))
    assert mode_of({}, report, OUTSIDE) == "warn"
    assert mode_of({}, report, INSIDE) == "enabled"
    assert mode_of({}, correct, OUTSIDE) == "enabled"
    assert mode_of({"helm-operator.io/drift": "disabled"}, report, INSIDE) == "disabled"
    assert mode_of({"helm-operator.io/maintenance-windows": "always"}, report, OUTSIDE) == "enabled"
