"""The test run's own reporting: JUnit cases read back as node ids, the slowdown factor's clamp, and
a failed resource's conditions in one line each."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.e2e import diagnosis, pace

REPO = Path(__file__).resolve().parents[2]


def _test_parts() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("test_parts", str(REPO / "tools/test-parts"))
    spec = importlib.util.spec_from_loader("test_parts", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["test_parts"] = module  # dataclasses look their module up by name
    loader.exec_module(module)
    return module


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
  <testcase classname="tests.e2e.test_ha" name="test_takeover[helm4]" time="12.5"/>
  <testcase classname="tests.e2e.test_ha.TestFence" name="test_fenced" time="3.0">
    <failure message="AssertionError: 2 PUTs&#10;assert 2 == 0">traceback</failure>
  </testcase>
  <testcase classname="tests.e2e.test_ring" name="test_spread" time="40.0">
    <error message="failed on setup with &quot;ClusterError: not ready&quot;">trace</error>
  </testcase>
  <testcase classname="tests.e2e.test_ring" name="test_later" time="0.1">
    <skipped message="not here"/>
  </testcase>
</testsuite></testsuites>
"""


def test_junit_cases_become_node_ids_with_outcome_and_first_message(tmp_path: Path) -> None:
    parts = _test_parts()
    path = tmp_path / "r.xml"
    path.write_text(JUNIT)
    got = {c.nodeid: (c.outcome, c.seconds, c.message) for c in parts.cases(path)}
    assert got == {
        "tests/e2e/test_ha.py::test_takeover[helm4]": ("passed", 12.5, ""),
        "tests/e2e/test_ha.py::TestFence::test_fenced": (
            "failed",
            3.0,
            "AssertionError: 2 PUTs\nassert 2 == 0",
        ),
        "tests/e2e/test_ring.py::test_spread": (
            "error",
            40.0,
            'failed on setup with "ClusterError: not ready"',
        ),
        "tests/e2e/test_ring.py::test_later": ("skipped", 0.1, "not here"),
    }
    assert parts.first_lines("AssertionError: 2 PUTs\nassert 2 == 0\n  more", n=2) == [
        "AssertionError: 2 PUTs",
        "assert 2 == 0",
    ]
    assert parts.first_lines("") == ["(no message)"]


def test_artifacts_are_found_by_the_node_id_the_diagnosis_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = _test_parts()
    monkeypatch.setattr(parts, "ARTIFACTS", tmp_path)
    folder = tmp_path / "test_ha.py_test_takeover_helm4"
    folder.mkdir()
    (folder / "nodeid").write_text("tests/e2e/test_ha.py::test_takeover[helm4]\n")
    assert parts.artifacts_of("tests/e2e/test_ha.py::test_takeover[helm4]") == folder
    assert parts.artifacts_of("tests/e2e/test_ha.py::test_other") is None


def test_the_slowdown_factor_is_clamped_and_can_be_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pace, "probe", lambda: pace.reference() * 10)
    monkeypatch.delenv("HELM_OPERATOR_E2E_SLOWDOWN", raising=False)
    assert pace.measure()[0] == pace.MAX_FACTOR
    monkeypatch.setattr(pace, "probe", lambda: pace.reference() / 2)
    assert pace.measure()[0] == 1.0
    monkeypatch.setenv("HELM_OPERATOR_E2E_SLOWDOWN", "2.5")
    assert pace.measure()[0] == 2.5
    monkeypatch.setattr(pace, "FACTOR", 2.0)
    assert pace.within(30) == 60


def test_a_resource_s_conditions_in_one_line() -> None:
    items = [
        {
            "kind": "Tiny",
            "metadata": {"name": "a", "deletionTimestamp": "x", "finalizers": ["helm-operator.io/uninstall"]},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "InstallFailed", "message": "boom"}
                ]
            },
        },
        {"kind": "Tiny", "metadata": {"name": "b"}},
    ]
    assert diagnosis.conditions(items) == [
        "Tiny/a (deleting; finalizers ['helm-operator.io/uninstall']): Ready=False InstallFailed: boom",
        "Tiny/b: no conditions",
    ]


def test_a_failed_call_s_own_words_are_in_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kubectl that failed says why only on its stderr, which ``CalledProcessError``'s message
    leaves out: the summary the closing block prints quotes it."""
    monkeypatch.setattr(diagnosis, "ARTIFACTS", tmp_path)
    failed = subprocess.CalledProcessError(
        2, ["/cache/kubectl", "exec", "rs-0"], "", "psql: error: connection refused\nis the server running?\n"
    )
    diagnosis.gather("tests/e2e/test_x.py::test_y", None, None, 0.0, [], failed)
    summary = (tmp_path / "test_x.py_test_y" / "summary.txt").read_text().splitlines()
    assert summary[1] == (
        "the call that failed said: kubectl exit 2: psql: error: connection refused | is the server running?"
    )
    diagnosis.gather("tests/e2e/test_x.py::test_z", None, None, 0.0, [], AssertionError("no"))
    assert "the call that failed" not in (tmp_path / "test_x.py_test_z" / "summary.txt").read_text()


def test_the_write_window_is_measured_only_once_writes_came_back() -> None:
    """A write under way when writes came back (its connection to the old primary) can fail
    after them: a log ending in that failure is not one ``written_again`` accepts, and
    ``unavailable`` says so instead of stopping on an empty iterator."""
    from tests.e2e.test_real_postgres import unavailable, written_again

    closed = [["9.0", "ok", "1"], ["10.5", "fail"], ["11.0", "fail"], ["12.5", "ok", "2"]]
    assert written_again(closed, 10.0, 12.0)
    assert unavailable(closed, 10.0) == (9.0, 12.5, 3.5)
    late = [["9.0", "ok", "1"], ["10.6", "ok", "2"], ["11.2", "fail"]]  # back at once, then one fails
    assert not written_again(late, 10.0, 10.5)
    with pytest.raises(AssertionError, match=r"no write acknowledged after the failure at 11.20 \(\+1.20s\)"):
        unavailable(late, 10.0)
