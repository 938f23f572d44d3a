"""The real node's start: its readiness deadline counts the node's own start, not the build of its
images (which happens once the machine's node is ours and takes minutes when their inputs changed)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from helm_operator.dev import realnode
from helm_operator.dev.realnode import RealNode
from helm_operator.dev.tools import Toolchain


def test_the_readiness_deadline_starts_once_the_images_are_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = RealNode(tmp_path / "cluster", tmp_path / "kubeconfig", Toolchain.discover())
    seen: dict[str, Any] = {}
    for piece in ("require", "_network_up", "_coredns_up", "_kubelet_up", "_kube_proxy_up"):
        monkeypatch.setattr(node, piece, lambda *a: None)
    monkeypatch.setattr(node, "_take_machine_lock", lambda wait: None)
    monkeypatch.setattr(node, "_containerd_up", lambda archives: seen.update(archives=list(archives)))
    monkeypatch.setattr(node, "_wait_ready", lambda deadline: seen.update(left=deadline - time.monotonic()))
    monkeypatch.setattr(realnode, "sysctl", lambda name: "0")

    def build() -> list[Path]:
        time.sleep(0.5)  # as a rebuild of the operator's image, scaled down
        return [Path("operator.tar")]

    node.start(build, timeout=0.4)
    assert seen["archives"] == [Path("operator.tar")]
    assert seen["left"] > 0.3, f"the image build used up the node's start timeout: {seen['left']:.2f}s left"
