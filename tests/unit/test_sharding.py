"""Static shards: what an instance started with ``--shard``/``--unsharded`` selects, labels and
digests, the flags that start it, and the manifests that deploy one Deployment per shard."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kopf
import pytest
import yaml
from kopf._cogs.structs import references

from helm_operator.adapters import postrender
from helm_operator.adapters.helm import Applied
from helm_operator.config import sharding
from helm_operator.config.charts import ChartRef, load_chart
from helm_operator.config.sharding import SHARD_LABEL, UNSHARDED
from helm_operator.config.watches import Watch, selector_matches, selector_query, sharded
from helm_operator.core.naming import OWNER_LABEL
from helm_operator.core.tenancy import NOT_ENFORCED
from helm_operator.core.values import digest
from helm_operator.drift.dependents import DependentWatches
from helm_operator.release.identity import ReleaseId
from helm_operator.release.record import StoredRelease
from helm_operator.runtime.actions import ActionContext, _apply
from helm_operator.runtime.desired import Target
from helm_operator.runtime.handlers import configure
from helm_operator.scaffold import deploy

from .test_cli import run  # the command as a user runs it, no cluster

CHART = ChartRef("tiny", Path("/charts/tiny"))
WATCH = Watch(
    "g.example.com", "v1", "Tiny", CHART, "tinies", "Namespaced", selector={"matchLabels": {"team": "x"}}
)


@pytest.mark.parametrize(
    ("shard", "query", "served", "not_served"),
    [
        ("a", f"team=x,{SHARD_LABEL} in (a)", {SHARD_LABEL: "a"}, [{SHARD_LABEL: "b"}, {}]),
        (UNSHARDED, f"team=x,!{SHARD_LABEL}", {}, [{SHARD_LABEL: "a"}]),
    ],
)
def test_a_shard_narrows_the_watch_selector_on_the_server_and_in_the_process(
    shard: str, query: str, served: dict[str, str], not_served: list[dict[str, str]]
) -> None:
    watch = sharded(WATCH, shard)
    assert watch.shard == shard and WATCH.selector == {"matchLabels": {"team": "x"}}  # not mutated
    assert selector_query(watch.selector) == query
    assert selector_matches(watch.selector, {"team": "x", **served})
    for labels in not_served:
        assert not selector_matches(watch.selector, {"team": "x", **labels})
    settings = kopf.OperatorSettings()
    configure(settings, [watch])
    resource = references.Resource(group="g.example.com", version="v1", plural="tinies", namespaced=True)
    assert list(settings.watching.label_selectors.collect(resource)) == [query]


def test_not_sharded_is_the_watch_as_written() -> None:
    assert sharded(WATCH, None) is WATCH
    assert sharding.selector("owner=helm", None) == "owner=helm"
    assert sharding.selector("owner=helm", "a") == f"owner=helm,{SHARD_LABEL}=a"
    assert sharding.selector("owner=helm", UNSHARDED) == f"owner=helm,!{SHARD_LABEL}"


def test_dependent_watches_select_only_the_shards_objects() -> None:
    kube: Any = None
    assert DependentWatches(kube, lambda o, c: None).selector == OWNER_LABEL
    assert DependentWatches(kube, lambda o, c: None, shard="a").selector == f"{OWNER_LABEL},{SHARD_LABEL}=a"
    unsharded = DependentWatches(kube, lambda o, c: None, shard=UNSHARDED)
    assert unsharded.selector == f"{OWNER_LABEL},!{SHARD_LABEL}"


@pytest.mark.parametrize("name", ["A", "a_b", "-a", "a.b", "x" * 41])
def test_a_shard_name_must_be_a_short_dns_label(name: str) -> None:
    problem = sharding.shard_problem(name)
    assert problem is not None and repr(name) in problem


def test_each_shard_elects_its_own_leader() -> None:
    assert sharding.lease_name("helm-operator", None) == "helm-operator"
    assert sharding.lease_name("helm-operator", "a") == "helm-operator-shard-a"
    assert sharding.lease_name("helm-operator", UNSHARDED) == "helm-operator-unsharded"


def test_a_named_shard_is_part_of_the_digest_and_no_shard_keeps_the_old_one(tmp_path: Path) -> None:
    (tmp_path / "Chart.yaml").write_text("apiVersion: v2\nname: c\nversion: 0.1.0\n")
    chart = load_chart(ChartRef(ref="c", path=tmp_path))
    plain = digest(chart, {"a": 1}, "uid")
    assert digest(chart, {"a": 1}, "uid", None) == plain == digest(chart, {"a": 1}, "uid", UNSHARDED)
    assert len({plain, digest(chart, {"a": 1}, "uid", "a"), digest(chart, {"a": 1}, "uid", "b")}) == 3


def test_the_post_renderer_labels_objects_with_the_shard_but_never_pod_templates() -> None:
    manifest = yaml.safe_dump_all(
        [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "d"},
                "spec": {"template": {"metadata": {"labels": {"app": "d"}}, "spec": {}}},
            },
        ]
    ).encode()
    argv = postrender.argv_for("own", None, "ns", None, NOT_ENFORCED, "a")
    assert "--shard=a" in argv
    code, out, err = postrender.render(argv, manifest)
    assert code == 0, err
    cm, dep = list(yaml.safe_load_all(out))
    assert cm["metadata"]["labels"] == {OWNER_LABEL: "own", SHARD_LABEL: "a"}
    assert dep["metadata"]["labels"][SHARD_LABEL] == "a"
    # a move between shards must not roll the workload's Pods
    assert dep["spec"]["template"]["metadata"]["labels"] == {"app": "d", OWNER_LABEL: "own"}
    unlabelled = postrender.argv_for("own", None, "ns", None, NOT_ENFORCED, None)
    code, out, _ = postrender.render(unlabelled, manifest)
    assert SHARD_LABEL not in next(yaml.safe_load_all(out))["metadata"]["labels"]


class RecordingHelm:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def install_or_upgrade(self, *args: Any, **kwargs: Any) -> Applied:
        self.calls.append(kwargs)
        return Applied({"info": {"status": "deployed"}, "version": 2})


@pytest.mark.parametrize(
    ("shard", "before", "labels", "unset"),
    [
        ("a", None, {SHARD_LABEL: "a"}, ()),
        (UNSHARDED, None, {}, ()),  # an install has no shard label to drop
        (UNSHARDED, 1, {}, (SHARD_LABEL,)),  # an upgrade drops one a shard left
        (None, 1, {}, ()),
    ],
)
def test_the_release_record_is_labelled_for_the_shard(
    shard: str | None, before: int | None, labels: dict[str, str], unset: tuple[str, ...]
) -> None:
    watch = sharded(WATCH, shard)
    target = Target(watch, ReleaseId("r", "ns", "owner-1"), "d1", {}, CHART)
    previous = StoredRelease(name="r", namespace="ns", revision=before, status="deployed") if before else None
    helm = RecordingHelm()
    ctx = ActionContext(helm, None, target, previous, {})  # type: ignore[arg-type]
    asyncio.run(_apply(ctx))
    (call,) = helm.calls
    assert {k: v for k, v in call["labels"].items() if k == SHARD_LABEL} == labels
    assert call["unset_labels"] == unset


def test_a_bad_shard_or_both_flags_are_start_up_errors(tmp_path: Path) -> None:
    (tmp_path / "watches.yaml").write_text("[]\n")
    bad = run("run", "--watches-file", str(tmp_path / "watches.yaml"), "--shard", "Shard_1")
    assert bad.returncode == 2 and "--shard: shard 'Shard_1' is not a DNS label" in bad.stderr, bad.stderr
    both = run("run", "--watches-file", str(tmp_path / "watches.yaml"), "--shard", "a", "--unsharded")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr, both.stderr


def test_manifests_for_static_shards_run_a_deployment_per_shard_and_one_unsharded() -> None:
    d = deploy.Deploy(shards=("a", "b"))
    docs = list(yaml.safe_load_all(deploy.config_files(d)["03-deployment.yaml"]))
    names = [doc["metadata"]["name"] for doc in docs]
    assert names == ["helm-operator-shard-a", "helm-operator-shard-b", "helm-operator-unsharded"]
    args = [doc["spec"]["template"]["spec"]["containers"][0]["args"] for doc in docs]
    assert [a[1] for a in args] == ["--shard=a", "--shard=b", "--unsharded"]
    assert all("--leader-elect" in a for a in args)
    selectors = [doc["spec"]["selector"]["matchLabels"] for doc in docs]
    assert len({tuple(sorted(s.items())) for s in selectors}) == 3  # no Deployment adopts another's Pods
    for doc, sel in zip(docs, selectors, strict=True):
        assert doc["spec"]["template"]["metadata"]["labels"] == sel
    # The metrics Service still selects every shard's Pods.
    service = yaml.safe_load(deploy.config_files(d)["04-metrics-service.yaml"])
    assert all(service["spec"]["selector"].items() <= s.items() for s in selectors)


def test_init_refuses_a_bad_shard_list(tmp_path: Path) -> None:
    proc = run("init", str(tmp_path / "op"), "--shards", "a,a")
    assert proc.returncode == 2 and "a shard is named twice" in proc.stderr, proc.stderr
    proc = run("init", str(tmp_path / "op"), "--shards", "a,B")
    assert proc.returncode == 2 and "shard 'B'" in proc.stderr, proc.stderr
    ok = run("init", str(tmp_path / "op"), "--shards", "a,b")
    assert ok.returncode == 0, ok.stderr
    text = (tmp_path / "op/config/03-deployment.yaml").read_text()
    assert "--shard=a" in text and "--shard=b" in text and "--unsharded" in text


def test_the_sweep_of_terminating_namespaces_finishes_only_what_the_instance_selects() -> None:
    """An instance finishes deletions kopf no longer reports (a terminating namespace) only for the
    resources its selector (its shard) selects; another shard's are left to that shard."""
    from types import SimpleNamespace

    from helm_operator.runtime import sweeper

    asked: list[str | None] = []

    class Kube:
        def terminating_namespaces(self) -> list[str]:
            return ["gone"]

        def deleting_custom(
            self, api_version: str, plural: str, ns: str, fin: str, sel: str | None
        ) -> list[Any]:
            asked.append(sel)
            return []

    runtime: Any = SimpleNamespace(kube=Kube())
    watch = sharded(WATCH, "a")
    asyncio.run(sweeper._sweep_once(runtime, [watch, WATCH], ["gone"], None, None))  # type: ignore[arg-type]
    assert asked == [f"team=x,{SHARD_LABEL} in (a)", "team=x"]


def test_a_ring_shard_selects_what_the_sharder_assigned_to_it_and_names_its_labels() -> None:
    from helm_operator.config.sharding import Ring
    from helm_operator.config.watches import in_ring

    ring = Ring("tinies", "pod-7")
    assert ring.shard_label == "shard.alpha.sharding.timebertt.dev/tinies"
    assert ring.drain_label == "drain.alpha.sharding.timebertt.dev/tinies"
    assert Ring.LEASE_LABEL == "alpha.sharding.timebertt.dev/controllerring"
    watch = in_ring(WATCH, ring)
    assert watch.ring == ring and watch.shard is None  # a move is no new digest
    assert selector_query(watch.selector) == f"team=x,{ring.shard_label} in (pod-7)"
    assert selector_matches(
        watch.selector, {"team": "x", ring.shard_label: "pod-7", ring.drain_label: "true"}
    )
    assert not selector_matches(watch.selector, {"team": "x", ring.shard_label: "pod-8"})
    assert in_ring(WATCH, None) is WATCH
    assert Ring("x" * 64, "Pod_1").problems() == [
        f"--controller-ring {'x' * 64!r} is not a DNS label (at most 63 characters)",
        "--shard-name 'Pod_1' is not a DNS label of at most 63 characters (it names the shard's Lease "
        "and is a label value)",
    ]


def test_a_shard_lease_carries_the_ring_label_when_created_and_renewed() -> None:
    from kubernetes import client

    from helm_operator.runtime.leader import LeaderSettings, _Lock

    created: list[Any] = []

    class Api:
        def create_namespaced_lease(self, namespace: str, body: Any, **_: Any) -> Any:
            created.append(body)
            return body

    settings = LeaderSettings("ns", name="pod-7", identity="pod-7", labels={"ring": "tinies"})
    lock = _Lock(client.ApiClient(), settings)
    lock.api_instance = Api()  # type: ignore[assignment]
    now = "2026-11-26 20:00:00.000000"
    record = SimpleNamespace(holder_identity="pod-7", lease_duration=15, acquire_time=now, renew_time=now)
    assert lock.create("pod-7", "ns", record)
    assert created[0].metadata.labels == {"ring": "tinies"} and created[0].metadata.name == "pod-7"
    assert created[0].spec.holder_identity == "pod-7"
    # A Lease made before (without the label) gets it at the next renewal.
    lock.lease_reference = client.V1Lease(metadata=client.V1ObjectMeta(name="pod-7", labels={"other": "x"}))
    lock.api_instance = SimpleNamespace(replace_namespaced_lease=lambda **kw: kw)  # type: ignore[assignment]
    assert lock.update("pod-7", "ns", record)
    assert lock.lease_reference.metadata.labels == {"other": "x", "ring": "tinies"}


def test_bad_ring_names_are_start_up_errors(tmp_path: Path) -> None:
    (tmp_path / "watches.yaml").write_text("[]\n")
    proc = run("run", "--watches-file", str(tmp_path / "watches.yaml"), "--controller-ring", "Ring_1")
    assert proc.returncode == 2 and "--controller-ring 'Ring_1' is not a DNS label" in proc.stderr, (
        proc.stderr
    )
    both = run(
        "run", "--watches-file", str(tmp_path / "watches.yaml"), "--controller-ring", "r", "--shard", "a"
    )
    assert both.returncode == 2 and "not allowed with argument" in both.stderr, both.stderr


def test_rbac_writes_the_controller_ring_of_the_watched_kinds_and_the_sharders_rights() -> None:
    from helm_operator.scaffold import rbac, sources

    crds = {("g.example.com", "Tiny"): rbac.ApiResource("g.example.com", "tinies", True)}
    other = Watch("h.example.com", "v1", "Box", CHART, plural="boxen")
    resources = sources._ring_resources([WATCH, other], crds)
    ring, role, binding = rbac.controller_ring("tinies", resources, rbac.Identity())
    assert ring["kind"] == "ControllerRing" and ring["metadata"]["name"] == "tinies"
    assert ring["spec"]["resources"] == [
        {"group": "g.example.com", "resource": "tinies"},
        {"group": "h.example.com", "resource": "boxen"},
    ]
    assert [dict(r) for r in role["rules"]] == [
        {"apiGroups": ["g.example.com"], "resources": ["tinies"], "verbs": ["list", "patch"]},
        {"apiGroups": ["h.example.com"], "resources": ["boxen"], "verbs": ["list", "patch"]},
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == "sharding:controllerring:tinies"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "sharder", "namespace": "sharding-system"}
    ]
    with pytest.raises(rbac.RbacError, match="plural of Box"):
        sources._ring_resources([Watch("h.example.com", "v1", "Box", CHART)], {})


def test_init_with_a_controller_ring_deploys_replicas_that_are_shards(tmp_path: Path) -> None:
    ok = run("init", str(tmp_path / "op"), "--controller-ring", "tinies")
    assert ok.returncode == 0, ok.stderr
    (doc,) = yaml.safe_load_all((tmp_path / "op/config/03-deployment.yaml").read_text())
    args = doc["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "--controller-ring=tinies" and "--leader-elect" not in args
    both = run("init", str(tmp_path / "other"), "--controller-ring", "tinies", "--shards", "a")
    assert both.returncode == 2 and "exclude each other" in both.stderr, both.stderr
