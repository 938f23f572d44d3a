"""Chart versions side by side: watches.yaml's charts list, pins as Helm writes ranges, and what
the status says (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helm_operator.config.versions import PinError, newer, select
from helm_operator.config.watches import WatchesError, load_watches
from helm_operator.runtime.desired import chart_for, chart_status

SERVED = ["1.2.0", "1.2.7", "1.3.0", "2.0.0"]


@pytest.mark.parametrize(
    ("pin", "chosen"),
    [
        (None, "2.0.0"),
        ("1.2.0", "1.2.0"),
        ("~1.2", "1.2.7"),
        ("^1", "1.3.0"),
        ("1.2.x", "1.2.7"),
        (">=1.2.0 <1.3.0", "1.2.7"),
        (">=1.2, <1.3", "1.2.7"),  # Helm's comma for "and"
        ("~1.2 || ^2", "2.0.0"),
    ],
)
def test_a_pin_selects_the_newest_version_it_matches(pin: str | None, chosen: str) -> None:
    assert select(SERVED, pin) == chosen


def test_a_pin_that_matches_nothing_or_is_no_range_is_refused_with_what_is_served() -> None:
    with pytest.raises(
        PinError, match=r"'~1.4' matches none of the served chart versions \(1.2.0, 1.2.7, 1.3.0, 2.0.0\)"
    ):
        select(SERVED, "~1.4")
    with pytest.raises(PinError, match="'latest please' is not a version or a version range"):
        select(SERVED, "latest please")


def test_a_newer_version_is_one_above_what_runs() -> None:
    assert newer("1.2.7", SERVED) == "2.0.0"
    assert newer("2.0.0", SERVED) is None
    assert newer(None, SERVED) is None


def chart(root: Path, name: str, version: str) -> Path:
    d = root / name
    d.mkdir()
    (d / "Chart.yaml").write_text(f"apiVersion: v2\nname: web\nversion: {version}\n")
    return d


def watches(root: Path, charts: str) -> Path:
    path = root / "watches.yaml"
    path.write_text(f"- group: example.com\n  version: v1\n  kind: Web\n  charts: {charts}\n")
    return path


def test_charts_are_read_with_their_own_versions_oldest_first(tmp_path: Path) -> None:
    chart(tmp_path, "web-1.3", "1.3.0")
    chart(tmp_path, "web-1.2", "1.2.0")
    (watch,) = load_watches(watches(tmp_path, "[{chart: web-1.3}, {chart: web-1.2, version: 1.2.0}]"), env={})
    assert [v for v, _ in watch.versions] == ["1.2.0", "1.3.0"]
    assert watch.chart.path == (tmp_path / "web-1.3").resolve()  # the newest serves what pins nothing
    assert chart_for(watch, None).path == (tmp_path / "web-1.3").resolve()
    assert chart_for(watch, "~1.2").path == (tmp_path / "web-1.2").resolve()
    status = chart_status(watch, "1.2.0", "1.2.0", "~1.2")
    assert status == {
        "version": "1.2.0",
        "pin": "~1.2",
        "served": ["1.2.0", "1.3.0"],
        "newest": "1.3.0",
        "upgradeAvailable": True,
    }


@pytest.mark.parametrize(
    ("charts", "words"),
    [
        ("[{chart: a}, {chart: b}]", "charts[1].version': 1.2.0 is served twice"),
        ("[{chart: a, version: 1.3.0}]", "charts[0].version': '1.3.0', but its Chart.yaml says '1.2.0'"),
        ("[{chart: missing}]", "charts[0]': no chart directory or .tgz"),
        (
            "[{chart: oci://example.com/web}]",
            "charts[0].version': a remote chart (oci://example.com/web) needs",
        ),
        ("[]", "charts': expected a non-empty list"),
        ("[{path: a}]", "charts[0]': expected {chart:"),
    ],
)
def test_a_bad_charts_list_names_the_entry(tmp_path: Path, charts: str, words: str) -> None:
    chart(tmp_path, "a", "1.2.0")
    chart(tmp_path, "b", "1.2.0")
    with pytest.raises(WatchesError) as err:
        load_watches(watches(tmp_path, charts), env={})
    assert words in str(err.value), str(err.value)


def test_chart_and_charts_together_are_refused(tmp_path: Path) -> None:
    chart(tmp_path, "a", "1.2.0")
    path = watches(tmp_path, "[{chart: a}]")
    path.write_text(path.read_text() + "  chart: a\n")
    with pytest.raises(WatchesError, match="give either 'chart' or 'charts'"):
        load_watches(path, env={})


def test_one_chart_and_no_pin_write_no_chart_status(tmp_path: Path) -> None:
    chart(tmp_path, "a", "1.2.0")
    path = tmp_path / "w.yaml"
    path.write_text("- {group: example.com, version: v1, kind: Web, chart: a}\n")
    (watch,) = load_watches(path, env={})
    assert chart_status(watch, "1.2.0", "1.2.0", None) is None
    assert chart_status(watch, "1.2.0", "1.1.0", "1.2.0") == {
        "version": "1.2.0",
        "pin": "1.2.0",
        "served": ["1.2.0"],
        "newest": "1.2.0",
        "upgradeAvailable": True,
    }
