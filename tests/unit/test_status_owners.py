"""Every status write goes through its owner: each part of a status, ``status.day2``'s keys
included, has one named owner (core/conditions.py), a write is composed from that owner's
contribution, and only adapters/report.py sends status patches."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from helm_operator.core.conditions import Contribution, Owner, StatusPatch, fields_patch, status_patch_of
from helm_operator.core.vocabulary import Condition, ConditionType
from helm_operator.hooks.context import Day2Status

PACKAGE = Path(__file__).resolve().parents[2] / "helm_operator"
WRITER = PACKAGE / "adapters" / "report.py"


def _calls(name: str) -> list[tuple[Path, ast.Call]]:
    """Every call of ``name`` in the package: a method (``x.name(…)``) or a plain name (``name(…)``)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else None
            )
            if called == name:
                found.append((path, node))
    return found


def test_only_the_reporter_sends_status_patches() -> None:
    elsewhere = [f"{p.relative_to(PACKAGE)}:{c.lineno}" for p, c in _calls("patch_status") if p != WRITER]
    assert elsewhere == [], f"status patched outside adapters/report.py: {elsewhere}"


def test_no_status_write_is_a_hand_made_dict() -> None:
    """A patch handed to the reporter comes from a contribution (``status_patch_of`` or
    ``fields_patch``), never a dict written at the call. (mypy holds the rest: the reporter takes
    a ``StatusPatch``, which only those two make.)"""
    raw = [
        f"{p.relative_to(PACKAGE)}:{c.lineno}"
        for p, c in _calls("status")
        if isinstance(c.func, ast.Attribute)
        and "reporter" in ast.unparse(c.func.value)
        and any(isinstance(a, ast.Dict) for a in c.args[2:])
    ]
    assert raw == [], f"status written from a hand-made dict: {raw}"


@pytest.mark.parametrize(
    ("owner", "day2", "refused"),
    [
        (Owner.HOOK_MODULE, {"backups": [], "schedules": {}}, "day2.schedules"),
        (Owner.ACTIONS, {"lastAction": {}, "backups": []}, "day2.backups"),
        (Owner.SCHEDULES, {"lastAction": {}}, "day2.lastAction"),
        (Owner.STAGES, {"problems": []}, "day2.problems"),
        (Owner.DAY2, {"currentPrimary": "db-0"}, "day2.currentPrimary"),
    ],
)
def test_each_key_of_day2_has_one_owner(owner: Owner, day2: dict[str, object], refused: str) -> None:
    with pytest.raises(ValueError, match=refused):
        Contribution(owner, fields={"day2": day2})


def test_the_owners_write_their_own_keys_and_the_rollout_its_whole_status() -> None:
    assert fields_patch(Contribution(Owner.HOOK_MODULE, fields={"day2": {"backups": []}})) == {
        "day2": {"backups": []}
    }
    assert fields_patch(Contribution(Owner.SCHEDULES, fields={"day2": {"schedules": {"nightly": {}}}}))
    assert fields_patch(Contribution(Owner.ROLLOUT, fields={"phase": "Progressing", "waves": []}))
    with pytest.raises(ValueError, match="does not own release"):
        Contribution(Owner.SCHEDULES, fields={"release": {}})
    with pytest.raises(ValueError, match="composed by status_patch_of"):
        fields_patch(Contribution(Owner.DAY2, (Condition(ConditionType.DAY2, True, "HooksSucceeded", ""),)))


def test_a_hook_module_is_told_at_once_when_it_writes_a_key_it_does_not_own() -> None:
    day2 = Day2Status({}, sink=None)  # type: ignore[arg-type]
    day2["backups"] = []
    with pytest.raises(ValueError, match=r"status.day2.schedules is written by the operator \(schedules\)"):
        day2["schedules"] = {}
    assert day2.changed == {"backups": []}


def test_only_the_owners_compositions_make_a_status_patch() -> None:
    """``Reporter.status`` and ``compose`` are typed with ``StatusPatch``; its makers are these two."""
    import inspect

    from helm_operator.adapters.report import Reporter

    assert inspect.signature(Reporter.status).parameters["patch"].annotation in ("StatusPatch", StatusPatch)
    assert inspect.signature(fields_patch).return_annotation in ("StatusPatch", StatusPatch)
    assert inspect.signature(status_patch_of).return_annotation in ("StatusPatch", StatusPatch)
    made = [
        f"{p.relative_to(PACKAGE)}:{c.lineno}" for p, c in _calls("StatusPatch") if p.name != "conditions.py"
    ]
    assert made == [], f"a status patch made outside core/conditions.py: {made}"
