"""EtcdCluster's resize and version rules: one member per upgrade, versions etcd moves between in
place, the volumes of removed members, and which template changes restart a member."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("etcd_members_hooks", ROOT / "hooks/etcdcluster.py")
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)


def _fn(name: str) -> Any:
    return getattr(_module, name)


@pytest.mark.parametrize(
    ("live", "wanted", "step"),
    [(None, 5, 5), (3, 3, 3), (1, 3, 2), (2, 3, 3), (3, 5, 4), (5, 3, 4), (4, 3, 3), (3, 1, 2)],
)
def test_a_resize_renders_one_member_more_or_fewer_per_upgrade(
    live: int | None, wanted: int, step: int
) -> None:
    assert _fn("next_size")(live, wanted) == step


@pytest.mark.parametrize(
    ("running", "wanted", "why"),
    [
        ("3.5.17", "3.5.21", None),
        ("3.5.17", "3.6.16", None),
        ("3.6.16", "3.6.16", None),
        ("3.6.16", "3.5.17", "a downgrade from 3.6.16 to 3.5.17: etcd does not downgrade in place"),
        (
            "3.4.30",
            "3.6.16",
            "3.4.30 to 3.6.16 skips a minor version: etcd upgrades one minor at a time (first 3.5)",
        ),
        ("3.6.16", "4.0.0", "3.6.16 to 4.0.0 changes the major version"),
    ],
)
def test_versions_etcd_moves_between_in_place(running: str, wanted: str, why: str | None) -> None:
    assert _fn("version_change")(running, wanted) == why


def test_the_volumes_of_removed_members_go() -> None:
    claims = ["data-db-0", "data-db-1", "data-db-3", "data-db-10", "data-dbx-4", "backups", "data-db-x"]
    assert _fn("stale_claims")(claims, "db", 3) == ["data-db-3", "data-db-10"]


def test_only_what_a_running_member_uses_restarts_it() -> None:
    def spec(image: str, cluster: str, memory: str = "1Gi") -> dict[str, Any]:
        env = [
            {"name": "ETCD_INITIAL_CLUSTER", "value": cluster},
            {"name": "ETCD_INITIAL_CLUSTER_STATE", "value": "new"},
        ]
        env.append({"name": "ETCD_NAME", "value": "$(POD_NAME)"})
        container = {"name": "etcd", "image": image, "env": env, "resources": {"limits": {"memory": memory}}}
        return {"spec": {"containers": [container]}}

    needs_restart = _fn("needs_restart")
    pod = spec("etcd:v3.6.16", "db-0=a,db-1=b,db-2=c")
    assert not needs_restart(pod, spec("etcd:v3.6.16", "db-0=a,db-1=b,db-2=c,db-3=d"))  # a resize
    assert needs_restart(pod, spec("etcd:v3.6.17", "db-0=a,db-1=b,db-2=c"))  # a version
    assert needs_restart(pod, spec("etcd:v3.6.16", "db-0=a,db-1=b,db-2=c", memory="2Gi"))  # resources


def _hand_over_in(
    volumes: bool, leader: str, upgraded: list[str], pod: str
) -> tuple[list[tuple[str, ...]], list[str]]:
    """``_hand_over`` against a fake three-member cluster: the etcdctl commands run (through which
    member) and the Events posted."""
    import asyncio
    import json
    import logging

    from helm_operator.hooks.context import Context, Day2Status
    from helm_operator.hooks.testing import FakeKube, _Events, _Saved

    ids = {f"upg-{i}": 100 + i for i in range(3)}
    pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": n, "namespace": "ns"}} for n in ids]
    kube = FakeKube(pods, None)
    ran: list[tuple[str, ...]] = []

    def answer(via: str, argv: tuple[str, ...]) -> str:
        command = tuple(a for a in argv[1:] if not a.startswith("--endpoints") and a not in ("-w", "json"))
        ran.append((via, *command))
        if command[:2] == ("member", "list"):
            url = "http://{}.upg.ns.svc:2380"
            return json.dumps(
                {"members": [{"ID": i, "name": n, "peerURLs": [url.format(n)]} for n, i in ids.items()]}
            )
        if command[:2] == ("endpoint", "status"):
            return json.dumps([{"Status": {"leader": ids[leader]}}])
        return ""

    kube.on_exec = answer
    spec = {"size": 3, "version": "3.6.16", "pod": {"persistentVolumeClaimSpec": {"x": 1}} if volumes else {}}
    resource = {"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
                "metadata": {"name": "upg", "namespace": "ns"}, "spec": spec}  # fmt: skip
    events = _Events()
    ctx = Context(resource, dict(spec), None, kube, Day2Status({}, _Saved()), events,
                  logging.LoggerAdapter(logging.getLogger("t"), {}))  # fmt: skip
    asyncio.run(_fn("_hand_over")(ctx, pod, upgraded))
    return ran, [e.reason for e in events.posted]


def test_the_leader_hands_over_to_an_upgraded_member_before_it_restarts() -> None:
    ran, said = _hand_over_in(volumes=True, leader="upg-0", upgraded=["upg-2", "upg-1"], pod="upg-0")
    changes = [r for r in ran if r[1] in ("move-leader", "member") and r[2:3] != ("list",)]
    assert changes == [("upg-0", "move-leader", format(101, "x"))]  # to an upgraded one, asked of the leader
    assert said == ["LeaderMoved"]
    ran, said = _hand_over_in(volumes=True, leader="upg-0", upgraded=[], pod="upg-2")
    assert [r for r in ran if r[1] == "move-leader" or r[2:3] in (("remove",), ("add",))] == [] and said == []


def test_a_member_without_a_volume_is_replaced_by_a_learner_before_it_restarts() -> None:
    ran, said = _hand_over_in(volumes=False, leader="upg-0", upgraded=[], pod="upg-2")
    changes = [r for r in ran if r[2:3] in (("remove",), ("add",))]
    assert changes == [
        ("upg-0", "member", "remove", format(102, "x")),
        ("upg-0", "member", "add", "upg-2", "--peer-urls=http://upg-2.upg.ns.svc:2380", "--learner"),
    ]
    assert said == ["MemberReplaced"]
