"""Static shards: what an instance started with ``--shard``/``--unsharded`` selects, labels and
digests, the flags that start it, and the manifests that deploy one Deployment per shard."""

from __future__ import annotations

import asyncio
import json
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
from helm_operator.runtime.desired import Target
from helm_operator.runtime.handlers import configure
from helm_operator.runtime.release_actions import ActionContext, _apply
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
    asyncio.run(sweeper._sweep_once(runtime, [watch, WATCH], ["gone"], None, None, None))  # type: ignore[arg-type]
    assert asked == [f"team=x,{SHARD_LABEL} in (a)", "team=x"]


def test_a_deletion_the_sweep_finishes_lets_the_release_go_from_a_ring_shards_named_watch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sweep ends like kopf's delete handler: the resource's release leaves the names a ring
    shard's Secret watch lists, and its state and resync go too."""
    from helm_operator.adapters.kube import ObjectRef
    from helm_operator.adapters.metrics import RELEASES, ReleaseStates
    from helm_operator.adapters.release_index import ReleaseIndex
    from helm_operator.release.dependencies import Dependents
    from helm_operator.release.identity import identify
    from helm_operator.runtime import sweeper
    from helm_operator.runtime.resyncs import Resyncs

    async def uninstalled(runtime: Any, watch: Watch, ns: str, name: str) -> tuple[str, list[Any]]:
        return "release uninstalled", []

    monkeypatch.setattr(sweeper, "finalize", uninstalled)

    class Kube:
        def get_custom(self, ref: ObjectRef, plural: str) -> None:
            return None  # gone with its finalizer

    releases = ReleaseIndex(api=None, namespaces=("gone",), by_release=True)  # type: ignore[arg-type]
    releases.hold("gone", "web")
    releases.hold("gone", "db")
    states = ReleaseStates()
    states.set(WATCH.key, identify(WATCH, "gone", "web").key, "ready")
    ready = RELEASES.labels(watch=WATCH.key, state="ready")
    assert ready._value.get() == 1
    runtime: Any = SimpleNamespace(
        kube=Kube(), releases=releases, settled={}, unheard={}, dependents=Dependents(), day2=None
    )
    unchecked: list[str] = []
    drift: Any = SimpleNamespace(forget=lambda watch, ns, name: unchecked.append(name))
    ref = ObjectRef(WATCH.api_version, WATCH.kind, "web", "gone", "u1")
    asyncio.run(sweeper._finish(runtime, WATCH, ref, Resyncs(), drift, states))
    _, naming = releases.target("gone") or ("", None)
    assert naming == {("gone", "db")}
    assert ready._value.get() == 0  # its state is no longer counted
    assert unchecked == ["web"]  # nor its drift


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


def test_a_ring_shard_watches_only_the_dependents_the_sharder_gave_it() -> None:
    ring = sharding.Ring("tinies", "s-1")
    query = sharding.selector(OWNER_LABEL, None, ring)
    assert query == f"{OWNER_LABEL},shard.alpha.sharding.timebertt.dev/tinies=s-1"
    assert sharding.holds(query, {OWNER_LABEL: "o", ring.shard_label: "s-1"})
    assert not sharding.holds(query, {OWNER_LABEL: "o", ring.shard_label: "s-2"})
    assert not sharding.holds(query, {ring.shard_label: "s-1"})
    unsharded = sharding.selector(OWNER_LABEL, UNSHARDED)
    assert sharding.holds(unsharded, {OWNER_LABEL: "o"}) and not sharding.holds(
        unsharded, {OWNER_LABEL: "o", SHARD_LABEL: "a"}
    )
    assert DependentWatches(SimpleNamespace(), lambda o, c: None, ring=ring).selector == query  # type: ignore[arg-type]


def test_a_dependent_moved_to_another_shard_is_not_taken_for_deleted() -> None:
    """The API server ends a selector's watch of an object relabelled out of it with DELETED: the
    sharder moving a resource's objects to its new shard is no drift for the old one."""
    from helm_operator.drift.dependents import KindWatch

    ring = sharding.Ring("tinies", "s-1")
    told: list[tuple[str, str]] = []
    watch = KindWatch(
        SimpleNamespace(),  # type: ignore[arg-type]
        ("apps/v1", "Deployment"),
        lambda owner, change: told.append((owner, change)),
        selector=sharding.selector(OWNER_LABEL, None, ring),
    )

    def deployment(shard: str) -> dict[str, Any]:
        labels = {OWNER_LABEL: "o", ring.shard_label: shard}
        return {"metadata": {"name": "d", "namespace": "ns", "labels": labels}, "spec": {}}

    watch._handle("ADDED", deployment("s-1"))
    watch._handle("DELETED", deployment("s-2"))  # moved
    assert told == [] and watch.cache == {}
    watch._handle("ADDED", deployment("s-1"))
    watch._handle("DELETED", deployment("s-1"))  # deleted while ours
    assert told == [("o", "changed")]


def test_cluster_scoped_dependents_are_watched_by_every_ring_shard() -> None:
    """The sharder labels only what a resource controls (namespaced, beside it): a ClusterRole a
    release creates carries no ring label, so its watch selects on the owner label (and a static
    shard) alone."""
    from helm_operator.drift.dependents import KindWatch

    ring = sharding.Ring("tinies", "s-1")
    watches = DependentWatches(SimpleNamespace(), lambda o, c: None, ring=ring)  # type: ignore[arg-type]
    asked: list[str] = []

    def listing(label_selector: str, **_: Any) -> Any:
        asked.append(label_selector)
        raise RuntimeError("enough")

    for namespaced in (True, False):
        kube = SimpleNamespace(resource=lambda *_, n=namespaced: SimpleNamespace(namespaced=n, get=listing))
        kind = ("apps/v1", "Deployment") if namespaced else ("rbac.authorization.k8s.io/v1", "ClusterRole")
        watch = KindWatch(
            kube,
            kind,
            lambda o, c: None,
            selector=watches.selector,
            cluster_selector=watches.cluster_selector,
        )  # type: ignore[arg-type]
        with pytest.raises(RuntimeError):
            watch._list_and_watch()
    assert asked == [f"{OWNER_LABEL},{ring.requirement()}", OWNER_LABEL]


def test_what_no_shard_label_can_select_is_named_member_by_member() -> None:
    assert sharding.members("name", ["web", "db", "web"]) == "name in (db,web)"
    assert sharding.members("name", []) is None  # `in ()` is no selector: the caller waits
    assert sharding.members("name", [f"release-{i}" for i in range(100)], limit=200) is None  # too long


def test_a_ring_shard_watches_the_release_secrets_of_what_it_holds_by_name() -> None:
    from helm_operator.adapters.release_index import SELECTOR, ReleaseIndex

    idx = ReleaseIndex(api=None, namespaces=("a",), by_release=True)  # type: ignore[arg-type]  # fed by hand
    assert idx.target("a") is None  # holds nothing yet: no listing
    idx.hold("a", "web")
    idx.hold("b", "db")  # another scope's
    selector, naming = idx.target("a") or ("", None)
    assert selector == f"{SELECTOR},name in (web)" and naming == {("a", "web")}
    stored = {"namespace": "a", "name": "sh.helm.release.v1.web.v1", "resourceVersion": "5"}
    labels = {"owner": "helm", "name": "web", "version": "1", "status": "deployed"}
    idx.listed("a", [{"metadata": {**stored, "labels": labels}}], naming)
    assert idx.fingerprint("a", "web") is not None
    assert not idx.stale("a", naming)
    idx.hold("a", "api")  # a resource moved in: not named by the running watch
    assert idx.stale("a", naming)
    assert idx.fingerprint("a", "api") is None  # not listed: read from the storage, never "no release"
    idx.drop("a", "web")  # moved away: listed again without it
    _, naming = idx.target("a") or ("", None)
    assert naming == {("a", "api")} and not idx.stale("a", naming)
    idx.drop("a", "api")
    assert idx.stale("a", naming) and idx.target("a") is None  # none held: nothing listed, nothing known
    # Not a ring's shard: every release of the scope, as before.
    assert ReleaseIndex(api=None).target(None) == (SELECTOR, None)  # type: ignore[arg-type]


def test_a_cluster_wide_named_watch_keeps_only_the_releases_it_holds_not_their_namesakes() -> None:
    """``name in (web)`` across all namespaces also matches another namespace's ``web``: the index
    neither keeps nor counts it, from the listing or from the watch."""
    from helm_operator.adapters.release_index import ReleaseIndex

    idx = ReleaseIndex(api=None, by_release=True)  # type: ignore[arg-type]  # fed by hand
    idx.hold("a", "web")
    _, naming = idx.target(None) or ("", None)

    def secret(ns: str, rv: str) -> dict[str, Any]:
        labels = {"owner": "helm", "name": "web", "version": "1", "status": "deployed"}
        meta = {"namespace": ns, "name": "sh.helm.release.v1.web.v1", "resourceVersion": rv, "labels": labels}
        return {"metadata": meta}

    idx.listed(None, [secret("a", "5"), secret("b", "6")], naming)
    assert idx.fingerprint("a", "web") is not None
    assert idx.fingerprint("b", "web") is None  # a namesake: not held, not known
    assert len(idx._revisions) == 1  # what the gauge counts
    idx.changed("MODIFIED", secret("b", "7"))
    assert len(idx._revisions) == 1
    before = idx.fingerprint("a", "web")
    idx.changed("MODIFIED", secret("a", "8"))
    assert idx.fingerprint("a", "web") != before  # the held one follows its writes


class _Calls:
    """A scripted API for one list-then-watch loop: each listing names what was held, each watch
    call returns nothing (its seconds passed)."""

    def __init__(self, hold: Any) -> None:
        self.calls: list[str] = []
        self.hold = hold

    def get(self, label_selector: str, watch: bool = False, **_: Any) -> Any:
        self.calls.append(("watch " if watch else "list ") + label_selector)
        if not watch:
            self.hold()  # a resource arrives while the listing is under way
        data = json.dumps({"items": [], "metadata": {"resourceVersion": "1"}})
        return SimpleNamespace(data=data, release_conn=lambda: None)


def test_holds_arriving_during_each_listing_are_named_by_the_next_one_after_a_watch_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A listing does not start over at once when what is held changed while it ran: the watch
    runs one call first, so a stream of new resources costs one listing per watch call."""
    from helm_operator.drift import dependents
    from helm_operator.hooks.watchers import ObjectWatches, _ObjectWatch

    watches = ObjectWatches(SimpleNamespace(), lambda owner, kind, obj: None, by_owner=True)  # type: ignore[arg-type]
    watches.hold("o0")
    held = iter(range(1, 100))
    api = _Calls(lambda: watches.hold(f"o{next(held)}"))

    class Stream:
        def stream(self, get: Any, **kwargs: Any) -> list[Any]:
            get(watch=True, **kwargs)
            return []

    monkeypatch.setattr(dependents.k8s_watch, "Watch", Stream)
    kube: Any = SimpleNamespace(resource=lambda *_: SimpleNamespace(namespaced=True, get=api.get))
    watch = _ObjectWatch(kube, ("v1", "Pod"), watches.changed, watches._holding)
    watch._list_and_watch()
    watch._list_and_watch()
    assert api.calls == [
        f"list {OWNER_LABEL} in (o0)",
        f"watch {OWNER_LABEL} in (o0)",
        f"list {OWNER_LABEL} in (o0,o1)",
        f"watch {OWNER_LABEL} in (o0,o1)",
    ]
    assert not watch.covers("o2") and watch.of("o2") is None  # held since: its hooks wait
    assert watch.of("o1") == []  # covered, and no Pods


def test_an_owner_whose_hooks_looked_before_the_first_listing_is_called_by_it_even_with_no_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A watch hook that ran before its kind's first listing waits for it; a release with no object
    of that kind (nothing installed yet) must still be called by the listing, or its hook never runs."""
    from helm_operator.drift import dependents
    from helm_operator.hooks.watchers import _ObjectWatch

    called: list[tuple[str, Any]] = []
    api = _Calls(lambda: None)

    class Stream:
        def stream(self, get: Any, **kwargs: Any) -> list[Any]:
            get(watch=True, **kwargs)
            return []

    monkeypatch.setattr(dependents.k8s_watch, "Watch", Stream)
    kube: Any = SimpleNamespace(resource=lambda *_: SimpleNamespace(namespaced=True, get=api.get))
    watch = _ObjectWatch(kube, ("v1", "ConfigMap"), lambda owner, kind, obj: called.append((owner, obj)))
    watch.stopped.set()  # one listing, no watch loop
    assert not watch.covers("empty") and watch.of("early") is None  # both looked too early
    watch._list_and_watch()
    assert sorted(called) == [("early", None), ("empty", None)]
    assert watch.covers("empty") and watch.of("empty") == []
    called.clear()
    watch._list_and_watch()  # a relisting with nothing changed calls nobody
    assert called == []


def test_the_release_index_of_a_ring_shard_paces_its_listings_the_same_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from helm_operator.adapters import release_index
    from helm_operator.adapters.release_index import SELECTOR, ReleaseIndex

    idx = ReleaseIndex(api=None, namespaces=("a",), by_release=True)  # type: ignore[arg-type]
    idx.hold("a", "r0")
    held = iter(range(1, 100))
    api = _Calls(lambda: idx.hold("a", f"r{next(held)}"))
    scope = idx._scopes[0]

    def request(accept: str, timeout: float, selector: str, **query: Any) -> Any:
        return api.get(selector, watch=bool(query.get("watch")))

    monkeypatch.setattr(scope, "_request", request)
    monkeypatch.setattr(release_index, "iter_resp_lines", lambda resp: iter(()))
    scope._list_and_watch()
    scope._list_and_watch()
    assert api.calls == [
        f"list {SELECTOR},name in (r0)",
        f"watch {SELECTOR},name in (r0)",
        f"list {SELECTOR},name in (r0,r1)",
        f"watch {SELECTOR},name in (r0,r1)",
    ]


def test_watching_everything_because_too_many_were_held_ends_once_they_fit_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from helm_operator.adapters.release_index import SELECTOR, ReleaseIndex
    from helm_operator.hooks.watchers import ObjectWatches, _ObjectWatch

    monkeypatch.setattr(sharding.members, "__defaults__", (40,))  # a limit of 40 characters
    idx = ReleaseIndex(api=None, namespaces=("a",), by_release=True)  # type: ignore[arg-type]
    for i in range(5):
        idx.hold("a", f"release-{i}")
    assert idx.target("a") == (SELECTOR, None)  # too many to name: every release's Secrets
    assert not idx.stale("a", None)
    for i in range(1, 5):
        idx.drop("a", f"release-{i}")
    assert idx.stale("a", None)  # one fits: named again at the next listing
    assert idx.target("a") == (f"{SELECTOR},name in (release-0)", {("a", "release-0")})
    idx.drop("a", "release-0")
    assert idx.stale("a", frozenset({("a", "release-0")}))

    watches = ObjectWatches(SimpleNamespace(), lambda owner, kind, obj: None, by_owner=True)  # type: ignore[arg-type]
    watch = _ObjectWatch(watches.kube, ("v1", "Pod"), watches.changed, watches._holding)
    for i in range(5):
        watches.hold(f"owner-{i}")
    watch._target()
    assert watch.selector == OWNER_LABEL and not watch._stale()
    for i in range(5):
        watches.drop(f"owner-{i}")
    assert watch._stale()  # none held: the selector that matches nothing, next
    watch._target()
    assert watch.selector == f"{OWNER_LABEL},!{OWNER_LABEL}"


def test_names_refused_as_too_long_on_the_way_to_the_api_server_are_dropped_once() -> None:
    """A proxy in front of the API server may cut request lines far shorter than the API server's
    limit: a 414 to a named listing turns the names off (everything watched, same answers)."""
    from helm_operator.adapters.release_index import SELECTOR, ReleaseIndex
    from helm_operator.hooks.watchers import ObjectWatches, _ObjectWatch

    idx = ReleaseIndex(api=None, namespaces=("a",), by_release=True)  # type: ignore[arg-type]
    idx.hold("a", "web")
    assert idx.target("a") == (f"{SELECTOR},name in (web)", {("a", "web")})
    assert idx.unnamed() and not idx.unnamed()  # once
    assert idx.target("a") == (SELECTOR, None) and not idx.stale("a", None)
    assert not ReleaseIndex(api=None).unnamed()  # type: ignore[arg-type]  # named nothing: not ours

    watches = ObjectWatches(SimpleNamespace(), lambda owner, kind, obj: None, by_owner=True)  # type: ignore[arg-type]
    watches.hold("o1")
    watch = _ObjectWatch(watches.kube, ("v1", "Pod"), watches.changed, watches._holding)
    watch._target()
    assert watch._too_long() and not watch._too_long()
    watch._target()
    assert watch.selector == OWNER_LABEL and not watch._stale()


def test_a_drain_waits_for_a_resync_read_in_flight_and_then_lets_the_resource_go() -> None:
    """A resync's read runs beside kopf's handlers: a drain (or leaving the selector) that went
    ahead of it would be followed by a reconcile that holds the release again."""
    from helm_operator.runtime.resyncs import Resyncs

    async def scenario() -> list[str]:
        resyncs, order = Resyncs(), []
        gate = asyncio.Event()

        async def reread() -> None:
            await gate.wait()
            order.append("reconciled")

        resyncs.reading["k"] = asyncio.create_task(reread())

        async def drain() -> None:
            await resyncs.settle("k")
            order.append("forgotten")

        draining = asyncio.create_task(drain())
        await asyncio.sleep(0.01)
        assert order == []  # waits for the read
        gate.set()
        await draining
        await resyncs.settle("absent")  # nothing in flight: at once
        return order

    assert asyncio.run(scenario()) == ["reconciled", "forgotten"]


def test_a_sharded_instance_watches_the_pods_of_the_owners_it_holds_and_hooks_wait_for_them() -> None:
    from helm_operator.hooks.watchers import ObjectWatches, _ObjectWatch

    told: list[str] = []
    watches = ObjectWatches(SimpleNamespace(), lambda owner, kind, obj: told.append(owner), by_owner=True)  # type: ignore[arg-type]
    watches.hold("o1")
    watch = _ObjectWatch(watches.kube, ("v1", "Pod"), watches.changed, watches._holding)

    def pod(owner: str, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "ns", "labels": {OWNER_LABEL: owner}}, "status": {}}

    watch._target()
    assert watch.selector == f"{OWNER_LABEL} in (o1)" and watch.watch_seconds <= 10
    assert not watch.covers("o1")  # not listed: a hook would see no Pods
    watch._listed({("ns", "p1"): watch._entry(pod("o1", "p1"))})
    assert watch.covers("o1") and told == ["o1"]
    watches.hold("o2")
    assert watch._stale() and not watch.covers("o2")
    watch._target()
    assert watch.selector == f"{OWNER_LABEL} in (o1,o2)"
    told.clear()
    watch._listed({("ns", "p1"): watch._entry(pod("o1", "p1"))})  # o2 has no Pods yet: told anyway
    assert watch.covers("o2") and told == ["o2"]
    watches.drop("o1")
    assert watch._stale()  # moved away: its Pods leave the cache at the next listing
    watch._target()
    assert watch.selector == f"{OWNER_LABEL} in (o2)"
    watches.drop("o2")
    watch._target()
    assert watch.selector == f"{OWNER_LABEL},!{OWNER_LABEL}"  # none held: a selector matching nothing
    # Not sharded: the owner label alone, every owner covered once listed.
    plain = _ObjectWatch(watches.kube, ("v1", "Pod"), watches.changed)
    plain._target()
    assert plain.selector == OWNER_LABEL and not plain.covers("o9")
    plain._listed({})
    assert plain.covers("o9")
