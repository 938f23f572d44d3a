"""A local cluster's folder: made with its owner in it, so another run's reaping never takes a
starting cluster for an orphan; folders of dead owners are removed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helm_operator.dev import devcluster
from helm_operator.dev.devcluster import OWNER_FILE, ClusterError, DevCluster, reap_orphans
from helm_operator.dev.tools import Toolchain

NO_TOOLS = Toolchain(**{name: Path("/nonexistent") for name in Toolchain.__dataclass_fields__})


@pytest.fixture
def clusters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A clusters folder of the test's own; ``stop()`` only removes the folder and is recorded."""
    monkeypatch.setenv("HELM_OPERATOR_CLUSTERS", str(tmp_path))
    stopped: list[str] = []

    def stop(self: DevCluster) -> None:
        stopped.append(self.name)
        shutil.rmtree(self.root, ignore_errors=True)

    monkeypatch.setattr(DevCluster, "stop", stop)
    monkeypatch.setattr(devcluster.Toolchain, "discover", classmethod(lambda cls: NO_TOOLS))
    return stopped


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_start_reaped_beside_at_the_moment_it_writes_its_owner_keeps_its_folder(
    clusters: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write = Path.write_text

    def reaped_meanwhile(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        if self.name == OWNER_FILE:
            reap_orphans()  # another run's start, at this very moment
        return write(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", reaped_meanwhile)
    cluster = DevCluster("starting", nodes=0, tools=NO_TOOLS)
    cluster._claim()
    assert clusters == []
    assert (cluster.root / OWNER_FILE).read_text() == str(os.getpid())
    assert [p.name for p in cluster.root.parent.iterdir()] == ["starting"]


def test_a_taken_name_is_refused_and_leaves_nothing_behind(clusters: list[str]) -> None:
    DevCluster("taken", nodes=0, tools=NO_TOOLS)._claim()
    again = DevCluster("taken", nodes=0, tools=NO_TOOLS)
    with pytest.raises(ClusterError, match="already exists"):
        again._claim()
    assert [p.name for p in again.root.parent.iterdir()] == ["taken"]


def test_folders_of_dead_owners_are_reaped_and_those_of_live_ones_kept(
    clusters: list[str], tmp_path: Path
) -> None:
    dead = _dead_pid()
    for name, owner in (("live", os.getpid()), ("orphan", dead)):
        (tmp_path / name).mkdir()
        (tmp_path / name / OWNER_FILE).write_text(str(owner))
    (tmp_path / "no-owner").mkdir()  # an older layout's, or one whose owner file was lost
    (tmp_path / f".starting.{os.getpid()}").mkdir()  # this process's start, not named yet
    (tmp_path / f".abandoned.{dead}").mkdir()  # a start killed before it named its folder

    assert sorted(reap_orphans()) == ["no-owner", "orphan"]
    assert sorted(clusters) == ["no-owner", "orphan"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".starting.{os.getpid()}", "live"]
