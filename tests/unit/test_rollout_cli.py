"""`helm-operator rollout pause|resume|abort`: each returns once the operator took the change (or
says it has not), and a rollout that is over is not said to be steered."""

from __future__ import annotations

import argparse
import copy
from typing import Any

import pytest

from helm_operator.cli import rollout as cli
from helm_operator.cli.common import UserError

NAME = "tinies.example.com"


class Api:
    """The Rollout as the API server keeps it; ``operator`` changes its status on the n-th read
    after a spec change (None: no operator runs)."""

    def __init__(self, status: dict[str, Any], spec: dict[str, Any] | None = None) -> None:
        self.obj = {"metadata": {"name": NAME}, "spec": spec or {}, "status": status}
        self.patches: list[dict[str, Any]] = []
        self.operator: tuple[int, dict[str, Any]] | None = None
        self.reads_since_patch = 0

    def get_cluster_custom_object(self, *_: Any) -> dict[str, Any]:
        if self.patches:
            self.reads_since_patch += 1
            if self.operator is not None and self.reads_since_patch >= self.operator[0]:
                self.obj["status"].update(self.operator[1])
        return copy.deepcopy(self.obj)

    def patch_cluster_custom_object(self, *args: Any) -> None:
        self.patches.append(args[-1]["spec"])
        self.obj["spec"].update(args[-1]["spec"])


def run(monkeypatch: pytest.MonkeyPatch, api: Api, verb: str, wait: float = 5.0) -> int:
    monkeypatch.setattr(cli, "_api", lambda args: api)
    monkeypatch.setattr(cli, "POLL_EVERY", 0.01)
    rc: int = getattr(cli, verb)(argparse.Namespace(name=NAME, wait=wait, kubeconfig=None))
    return rc


def test_abort_returns_once_the_operator_aborted(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    api = Api({"rollout": "R2", "phase": "Halted"})
    api.operator = (3, {"phase": "Aborted"})
    assert run(monkeypatch, api, "abort") == 0
    assert api.patches == [{"abort": "R2", "paused": False}]
    assert api.reads_since_patch >= 3, "it waited for the operator"
    assert capsys.readouterr().out.startswith(f"{NAME}: aborted: ")


def test_a_change_the_operator_does_not_take_in_time_is_said_so(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    api = Api({"rollout": "R2", "phase": "Progressing"})
    assert run(monkeypatch, api, "pause", wait=0.1) == 1
    err = capsys.readouterr().err
    assert "asked to pause, but the operator has not taken it within 0.1s: is it running?" in err, err
    assert api.obj["spec"] == {"paused": True}, "the ask stays for the operator to take"


def test_a_rollout_that_is_over_is_not_said_to_be_aborted_or_resumed(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    for phase in ("Complete", "Aborted"):
        api = Api({"rollout": "R2", "phase": phase})
        with pytest.raises(UserError, match=f"rollout R2 is {phase}: nothing to abort"):
            run(monkeypatch, api, "abort")
        with pytest.raises(UserError, match=f"rollout R2 is {phase}: nothing to resume"):
            run(monkeypatch, api, "resume")
        assert api.patches == []
    # A pause set while none moves is for the next rollout: said so, nothing to wait for.
    api = Api({"rollout": "R2", "phase": "Complete"})
    assert run(monkeypatch, api, "pause") == 0
    assert "the next rollout starts paused" in capsys.readouterr().out
    assert run(monkeypatch, api, "resume") == 0 and api.obj["spec"]["paused"] is False
    assert "the next rollout starts moving" in capsys.readouterr().out


def test_resume_of_a_halted_wave_waits_for_its_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    api = Api({"rollout": "R2", "phase": "Halted", "retries": 1}, {"retries": 1})
    api.operator = (2, {"phase": "Progressing", "retries": 2})
    assert run(monkeypatch, api, "resume") == 0
    assert api.patches == [{"paused": False, "retries": 2}]
