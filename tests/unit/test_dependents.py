from __future__ import annotations

from typing import Any

from helm_operator.core.naming import OWNER_LABEL
from helm_operator.drift.dependents import (
    DependentWatches,
    KindWatch,
    Seen,
    classify,
    relist_changes,
    seen,
    signature,
)
from helm_operator.release.health import Health, assess
from helm_operator.release.record import ObjectId

OURS = frozenset({"helm"})


def _seen(spec: str, owner: str, ready: bool = True) -> Seen:
    return Seen(spec, ready, owner, frozenset())


def test_relist_reports_owners_of_changed_and_vanished_objects() -> None:
    old = {("ns", "a"): _seen("s1", "o1"), ("ns", "b"): _seen("s2", "o2"), ("ns", "c"): _seen("s3", "o3")}
    new = {
        ("ns", "a"): _seen("s1", "o1"),
        ("ns", "b"): _seen("s2-changed", "o2"),
        ("ns", "d"): _seen("s4", "o4"),
    }
    assert relist_changes(old, new) == {"o2", "o3"}
    assert relist_changes({}, new) == set()  # the first listing reports nothing
    assert relist_changes(old, {**old, ("ns", "a"): _seen("s1", "o1", ready=False)}) == {"o1"}


def test_signature_ignores_status_and_bookkeeping() -> None:
    cm = {"metadata": {"name": "c", "resourceVersion": "1", "managedFields": [1]}, "data": {"k": "v"}}
    moved = {**cm, "metadata": {"name": "c", "resourceVersion": "2"}, "status": {"x": 1}}
    assert signature(cm) == signature(moved)
    assert signature(cm) != signature({**cm, "data": {"k": "w"}})
    deploy = {
        "metadata": {"name": "d", "generation": 3, "labels": {"a": "1"}},
        "spec": {"replicas": 1},
        "status": {"readyReplicas": 0},
    }
    assert signature(deploy) == signature({**deploy, "status": {"readyReplicas": 1}})
    assert signature(deploy) != signature({**deploy, "metadata": {**deploy["metadata"], "generation": 4}})
    # The Deployment controller's own annotation is never a chart's, so never drift; a user's is.
    rolled = {
        **deploy,
        "metadata": {**deploy["metadata"], "annotations": {"deployment.kubernetes.io/revision": "2"}},
    }
    assert signature(rolled) == signature(deploy)
    noted = {**deploy, "metadata": {**deploy["metadata"], "annotations": {"team": "web"}}}
    assert signature(noted) != signature(deploy)


def _deployment(generation: int, available: int, writes: list[tuple[str, str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "ns",
            "generation": generation,
            "labels": {OWNER_LABEL: "o"},
            "managedFields": [
                {
                    "manager": m,
                    "operation": op,
                    "time": t,
                    **({"subresource": "status"} if m == "kcm" else {}),
                }
                for m, op, t in writes
            ],
        },
        "spec": {"replicas": 1},
        "status": {
            "observedGeneration": generation,
            "updatedReplicas": available,
            "availableReplicas": available,
        },
    }


def test_what_an_update_means_for_the_release() -> None:
    installed = [("helm", "Apply", "10:00:00"), ("kcm", "Update", "10:00:01")]
    before = seen(_deployment(1, 1, installed))
    assert before.ready and before.owner == "o"
    # A controller's status write that does not change readiness: nothing.
    assert (
        classify(before, seen(_deployment(1, 1, [installed[0], ("kcm", "Update", "10:00:09")])), OURS) == ()
    )
    # Only readiness changed (a Pod went away): report it, compare nothing.
    assert classify(before, seen(_deployment(1, 0, [installed[0], ("kcm", "Update", "10:00:09")])), OURS) == (
        "readiness",
    )
    # Helm upgraded it (its entry is newer): nothing to compare.
    upgraded = seen(_deployment(2, 1, [("helm", "Apply", "10:05:00"), installed[1]]))
    assert classify(before, upgraded, OURS) == ("applied",)
    # Helm scaled it back (a correction) and that made it ready again: say both.
    corrected = seen(_deployment(2, 1, [("helm", "Apply", "10:05:00"), installed[1]]))
    assert classify(seen(_deployment(1, 0, installed)), corrected, OURS) == ("applied", "readiness")
    # Someone scaled it: compare, even when Helm wrote in the same second.
    scaled = [("helm", "Apply", "10:05:00"), installed[1], ("kubectl", "Update", "10:05:00")]
    assert classify(before, seen(_deployment(2, 1, scaled)), OURS) == ("changed",)
    # A spec change with no newer entry (a manager writing twice within a second): compare.
    assert classify(before, seen(_deployment(2, 1, installed)), OURS) == ("changed",)
    # Nothing seen before (a watch event for an object not in the cache): compare.
    assert classify(None, before, OURS) == ("changed",)
    # A Helm 3 whose executable has another name writes under that name.
    assert classify(before, upgraded._replace(writes=frozenset({("helm3", "Update", "", "t")})), OURS) == (
        "changed",
    )
    assert classify(
        before, upgraded._replace(writes=frozenset({("helm3", "Update", "", "t")})), OURS | {"helm3"}
    ) == ("applied",)


def test_what_the_watch_reports_for_each_event() -> None:
    said: list[tuple[str, str]] = []
    w = KindWatch(kube=None, kind=("apps/v1", "Deployment"), notify=lambda o, c: said.append((o, c)))  # type: ignore[arg-type]
    installed = [("helm", "Apply", "10:00:00")]
    w._handle("ADDED", _deployment(1, 1, installed))
    assert said == []  # created by Helm (or a correction): nothing drifted
    w._handle("MODIFIED", _deployment(2, 1, [("helm", "Apply", "10:05:00")]))
    w._handle("MODIFIED", _deployment(2, 0, [("helm", "Apply", "10:05:00"), ("kcm", "Update", "10:05:01")]))
    w._handle(
        "MODIFIED", _deployment(3, 0, [("helm", "Apply", "10:05:00"), ("kubectl", "Update", "10:06:00")])
    )
    assert said == [("o", "applied"), ("o", "readiness"), ("o", "changed")]
    unlabelled = _deployment(3, 0, [])
    unlabelled["metadata"]["labels"] = {}  # someone removed the owner label: the watch sees it go
    w._handle("DELETED", unlabelled)
    assert said[-1] == ("o", "changed") and not w.cache


def test_a_kinds_first_listing_asks_its_workloads_owners_to_read_readiness_again() -> None:
    """A release read its Deployment's readiness just before the watch's first listing: had it
    become ready in between, only the resync would have told (a minute later)."""
    said: list[tuple[str, str]] = []
    w = KindWatch(kube=None, kind=("apps/v1", "Deployment"), notify=lambda o, c: said.append((o, c)))  # type: ignore[arg-type]
    w._listed({("ns", "a"): _seen("s1", "o1"), ("ns", "b"): _seen("s2", "o2", ready=False)})
    assert sorted(said) == [("o1", "readiness"), ("o2", "readiness")]
    said.clear()
    w._listed({("ns", "a"): _seen("s1", "o1"), ("ns", "b"): _seen("s2", "o2", ready=True)})  # after a gap
    assert said == [("o2", "changed")]  # only what changed since the last listing
    cms: list[tuple[str, str]] = []
    c = KindWatch(kube=None, kind=("v1", "ConfigMap"), notify=lambda o, ch: cms.append((o, ch)))  # type: ignore[arg-type]
    c._listed({("ns", "c"): _seen("s3", "o3")})
    assert cms == []  # no readiness to a ConfigMap


def test_a_kinds_watch_runs_while_some_release_uses_it(monkeypatch: Any) -> None:
    started: list[str] = []
    stopped: list[str] = []
    monkeypatch.setattr(KindWatch, "start", lambda self: started.append(self.kind[1]))
    monkeypatch.setattr(KindWatch, "stop", lambda self: stopped.append(self.kind[1]))
    deps = DependentWatches(kube=None, notify=lambda o, c: None)  # type: ignore[arg-type]
    deploy, cm, svc = ("apps/v1", "Deployment"), ("v1", "ConfigMap"), ("v1", "Service")
    deps.use("a", [deploy, cm])
    deps.use("b", [deploy])
    deps.use("a", [deploy, cm])  # every check of a release says it again: nothing starts twice
    assert sorted(started) == ["ConfigMap", "Deployment"] and stopped == []
    deps.use("a", [deploy, svc])  # an upgrade dropped the ConfigMap and added a Service
    assert stopped == ["ConfigMap"] and started[-1] == "Service"
    deps.release("a")
    assert sorted(stopped) == ["ConfigMap", "Service"]  # b still uses Deployments
    deps.release("b")
    deps.release("b")  # released twice (a deletion seen again): counts never go below zero
    assert sorted(stopped) == ["ConfigMap", "Deployment", "Service"]
    assert deps.stats()["kinds"] == {}
    deps.use("c", [deploy])  # used again after its watch stopped: a new watch
    assert started.count("Deployment") == 2
    deps.use("c", [deploy, svc])  # its only user adds a kind: the Deployments' watch keeps running
    assert started.count("Deployment") == 2 and stopped.count("Deployment") == 1


def test_a_readiness_change_is_reported_from_what_the_watch_cached(monkeypatch: Any) -> None:
    """What the watch saw is what a read would find (``assess``'s words), while it is live and holds
    every workload; otherwise only a read can tell (None)."""
    monkeypatch.setattr(KindWatch, "start", lambda self: None)
    deps = DependentWatches(kube=None, notify=lambda o, c: None)  # type: ignore[arg-type]
    deps.use("o", [("apps/v1", "Deployment")])
    web = ObjectId("apps/v1", "Deployment", None, "web")
    watch = deps._watches[("apps/v1", "Deployment")]
    watch._handle("ADDED", _deployment(1, 0, []))
    assert deps.health([web], "ns") is None  # not listed and connected yet
    watch.live = True
    unready = _deployment(1, 0, [])
    assert (
        deps.health([web], "ns")
        == assess([unready])
        == Health(("Deployment/web: 0/1 replicas available, 0 updated",))
    )
    watch._handle("MODIFIED", _deployment(1, 1, []))
    assert deps.health([web], "ns") == assess([_deployment(1, 1, [])]) == Health()
    assert deps.health([web, ObjectId("apps/v1", "Deployment", "ns", "api")], "ns") is None  # not seen
    assert deps.health([ObjectId("apps/v1", "StatefulSet", None, "db")], "ns") is None  # not watched
    assert deps.health([], "ns") == Health()
