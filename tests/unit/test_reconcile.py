"""prepare → decide → act → report, end to end in memory: small fakes of helm, of Helm's storage
(release Secrets as Helm writes them, so the real decoding and unlocking run) and of the status
writer. The e2e tests remain the truth for helm and the API server themselves."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from helm_operator.adapters.helm import Applied, HelmError, classify
from helm_operator.adapters.release_index import ReleaseIndex
from helm_operator.adapters.storage import decode_release, encode_release
from helm_operator.config.charts import ChartRef
from helm_operator.config.watches import Watch
from helm_operator.core.naming import ACTION_ANNOTATION, DIGEST_LABEL, OWNER_LABEL
from helm_operator.release.identity import identify
from helm_operator.release.record import ObjectId
from helm_operator.release.state import RetryPolicy
from helm_operator.runtime.desired import Resource
from helm_operator.runtime.reconcile import reconcile, unheard_action
from helm_operator.runtime.resyncs import kept
from helm_operator.runtime.services import Runtime
from helm_operator.runtime.settled import status_digest, unchanged

TINY = Path(__file__).resolve().parents[1] / "e2e/charts/tiny"
CHART = ChartRef(str(TINY), TINY)
WATCH = Watch("test.helm-operator.io", "v1", "Tiny", CHART, "tinies", "Namespaced")


@dataclass
class Revision:
    number: int
    status: str
    digest: str
    owner: str
    description: str = ""


class Storage:
    """Helm's release Secrets of one namespace, served like the API server serves them."""

    def __init__(self) -> None:
        self.revisions: list[Revision] = []

    def list_namespaced_secret(self, namespace: str, label_selector: str) -> Any:
        items = []
        for r in self.revisions:
            body = {
                "info": {"status": r.status, "description": r.description},
                "chart": {"metadata": {"name": "tiny", "version": "0.1.0"}},
                "manifest": "",
            }
            labels = {
                "version": str(r.number),
                "status": r.status,
                OWNER_LABEL: r.owner,
                DIGEST_LABEL: r.digest,
            }
            items.append(
                SimpleNamespace(
                    metadata=SimpleNamespace(labels=labels, name=f"sh.helm.release.v1.t.v{r.number}"),
                    data={"release": encode_release(body)},
                )
            )
        return SimpleNamespace(items=items)

    def replace_namespaced_secret(self, name: str, namespace: str, secret: Any) -> None:
        number = int(name.rsplit(".v", 1)[1])
        info = decode_release(secret.data["release"])["info"]
        rev = next(r for r in self.revisions if r.number == number)
        rev.status, rev.description = info["status"], info["description"]


@dataclass
class FakeHelm:
    storage: Storage
    fail: HelmError | None = None
    calls: list[str] = field(default_factory=list)
    seconds: float = 0.0  # how long an install or upgrade takes

    async def install_or_upgrade(self, name: str, namespace: str, *a: Any, labels: Any, **kw: Any) -> Applied:
        self.calls.append("upgrade")
        await asyncio.sleep(self.seconds)
        for r in self.storage.revisions:
            r.status = "superseded" if r.status == "deployed" else r.status
        status = "failed" if self.fail else "deployed"
        rev = Revision(len(self.storage.revisions) + 1, status, labels[DIGEST_LABEL], labels[OWNER_LABEL])
        self.storage.revisions.append(rev)
        if self.fail:
            raise self.fail
        printed = {"name": name, "namespace": namespace, "version": rev.number, "info": {"status": status}}
        return Applied(printed, (ObjectId("v1", "ConfigMap", None, name),))

    async def rollback(self, name: str, namespace: str, revision: int | None, **kw: Any) -> None:
        """A new revision that redeploys the one named (else the last good one), as `helm rollback`."""
        self.calls.append("rollback" if revision is None else f"rollback {revision}")
        good = next(
            r
            for r in reversed(self.storage.revisions)
            if (r.number == revision if revision is not None else r.status == "superseded")
        )
        for r in self.storage.revisions:
            r.status = "superseded" if r.status == "deployed" else r.status
        self.storage.revisions.append(
            Revision(len(self.storage.revisions) + 1, "deployed", good.digest, good.owner)
        )

    async def uninstall(self, *a: Any, **kw: Any) -> bool:
        self.calls.append("uninstall")
        found = bool(self.storage.revisions)
        self.storage.revisions = []
        return found

    async def pull(self, chart: Any) -> Path:
        raise AssertionError("local charts are never pulled")


class Reporter:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    async def status(self, ref: Any, plural: str, patch: Any) -> bool:
        self.patches.append(dict(patch))
        return True

    async def compose(self, ref: Any, plural: str, patch_of: Any, read: Any = None) -> bool:
        patch = patch_of({"metadata": {"resourceVersion": "1"}, "status": {}})
        return await self.status(ref, plural, patch) if patch else True


def runtime(helm: FakeHelm) -> Runtime:
    kube: Any = SimpleNamespace(core=helm.storage, get_custom=lambda ref, plural: {"metadata": {}})
    discovery: Any = SimpleNamespace(scopes=dict)
    return Runtime(helm, kube, discovery, Reporter(), drift=None, retry=RetryPolicy(base=30, cap=60))  # type: ignore[arg-type]


def cr(spec: dict[str, Any], status: dict[str, Any] | None = None, generation: int = 1) -> Resource:
    return Resource(WATCH, "ns", "t", "uid-1", generation, spec, status or {}, {})


def run(rt: Runtime, resource: Resource) -> Any:
    return asyncio.run(reconcile(rt, resource))


def test_install_then_nothing_to_do_without_a_helm_call() -> None:
    helm = FakeHelm(Storage())
    rt = runtime(helm)
    first = run(rt, cr({"message": "hi"}))
    assert (first.outcome.reason, helm.calls) == ("InstallSucceeded", ["upgrade"])
    assert first.outcome.release is not None and first.outcome.release.revision == 1  # as helm printed it
    assert not first.announced and rt.reporter.patches == []  # type: ignore[attr-defined]
    again = run(rt, cr({"message": "hi"}))
    assert (again.outcome.reason, helm.calls) == ("ReconciliationSucceeded", ["upgrade"])


def test_a_slow_action_is_announced_before_its_outcome(monkeypatch: Any) -> None:
    monkeypatch.setattr("helm_operator.runtime.acting.PROGRESS_GRACE", 0.01)
    helm = FakeHelm(Storage(), seconds=0.2)
    rt = runtime(helm)
    first = run(rt, cr({"message": "hi"}))
    assert first.outcome.reason == "InstallSucceeded" and first.announced
    progress = rt.reporter.patches[0]["conditions"]  # type: ignore[attr-defined]
    assert [(c["type"], c["status"], c["reason"]) for c in progress][:2] == [
        ("Ready", "Unknown", "Installing"),
        ("Reconciling", "True", "Installing"),
    ]


def test_an_interrupted_upgrade_is_unlocked_and_upgraded_once() -> None:
    helm = FakeHelm(Storage())
    rt = runtime(helm)
    run(rt, cr({"message": "one"}))
    helm.storage.revisions[-1].status = "superseded"
    owner, old = helm.storage.revisions[-1].owner, helm.storage.revisions[-1].digest
    helm.storage.revisions.append(Revision(2, "pending-upgrade", old + "x", owner))  # its writer was killed
    result = run(rt, cr({"message": "two"}, generation=2))
    assert [e[1] for e in result.events] == ["Unlocked", "UpgradeSucceeded"]
    assert helm.calls == ["upgrade", "upgrade"]  # no rollback in between
    assert [r.status for r in helm.storage.revisions] == ["superseded", "failed", "deployed"]


# What the API server tells Helm once the namespace's deletion has begun (Helm's first write fails).
ENDING = (
    'create: failed to create: secrets "sh.helm.release.v1.t.v1" is forbidden: unable to create new '
    "content in namespace ns because it is being terminated"
)


def test_a_namespace_being_deleted_stops_the_action_without_cleanup_rollback_or_retry() -> None:
    helm = FakeHelm(Storage(), fail=HelmError(classify(ENDING), ENDING))
    rt = runtime(helm)
    stopped = run(rt, cr({"message": "one"}))
    assert (stopped.outcome.phase, stopped.outcome.reason, stopped.retry_after) == (
        "progressing",
        "Cancelled",
        None,
    )
    assert stopped.outcome.message == "install stopped: namespace ns is being deleted"
    assert helm.calls == ["upgrade"]  # no uninstall of debris: the release record was never written
    helm.fail, helm.storage.revisions = None, []
    run(rt, cr({"message": "one"}))
    helm.fail = HelmError(classify(ENDING), ENDING)
    stopped = run(rt, cr({"message": "two"}, generation=2))
    assert (stopped.outcome.reason, stopped.retry_after) == ("Cancelled", None)
    assert helm.calls == ["upgrade", "upgrade", "upgrade"]  # no rollback either
    # Another namespace going away (an object the chart puts there) fails the upgrade as any other.
    elsewhere = ENDING.replace("namespace ns ", "namespace other ")
    helm.fail = HelmError(classify(elsewhere), elsewhere)
    failed = run(rt, cr({"message": "three"}, generation=3))
    assert (failed.outcome.phase, failed.outcome.reason, helm.calls[-2:]) == (
        "failed",
        "UpgradeFailed",
        ["upgrade", "rollback"],  # to the last good revision
    )


def test_failures_back_off_then_give_up_keeping_the_reason() -> None:
    helm = FakeHelm(Storage())
    rt = runtime(helm)
    run(rt, cr({"message": "one"}))
    helm.fail = HelmError("HelmFailed", "the API server said no")
    failed = run(rt, cr({"message": "two"}, generation=2))
    assert (failed.outcome.reason, failed.retry_after, helm.calls[-2:]) == (
        "UpgradeFailed",
        30,
        ["upgrade", "rollback 1"],
    )
    waiting = run(rt, cr({"message": "two"}, generation=2))  # too soon: backoff, no helm
    assert (waiting.outcome.reason, helm.calls.count("upgrade")) == ("UpgradeFailed", 2)
    assert waiting.outcome.phase == "progressing" and 0 < (waiting.retry_after or 0) <= 30
    rt.attempts["ns/t"] = replace(rt.attempts["ns/t"], failures=5)  # max retries (5) reached
    said = {
        "conditions": [
            {
                "type": "Released",  # the last action's: a backoff wait keeps it
                "status": "False",
                "reason": "UpgradeFailed",
                "message": "the API server said no",
            }
        ]
    }
    given_up = run(rt, cr({"message": "two"}, said, generation=2))
    assert (given_up.outcome.phase, given_up.outcome.reason, helm.calls.count("upgrade")) == (
        "stalled",
        "RetriesExhausted",
        2,
    )
    # The cause stays named (what `rollout status` shows of a failed member, and a person reads).
    assert given_up.outcome.message.endswith("; the last failure (UpgradeFailed): the API server said no")


def test_a_permanent_failure_is_announced_once() -> None:
    helm = FakeHelm(Storage(), fail=HelmError("RenderFailed", "tiny/templates/x.yaml:1: nil pointer"))
    rt = runtime(helm)
    first = run(rt, cr({"message": "x"}))
    assert (first.outcome.phase, first.outcome.reason) == ("stalled", "RenderFailed")
    status = {
        "conditions": [
            {"type": "Stalled", "status": "True", "reason": "RenderFailed", "message": first.outcome.message}
        ],
        "lastAttempt": {
            "digest": first.attempts.digest,
            "failures": 1,
            "permanent": True,
            "reason": "RenderFailed",
            "time": "2026-01-01T00:00:00Z",
        },
    }
    again = run(rt, cr({"message": "x"}, status))
    assert (again.outcome.reason, again.events, helm.calls) == ("RenderFailed", (), ["upgrade"])


def test_invalid_values_and_draining_never_reach_helm() -> None:
    memcached = Path(__file__).resolve().parents[2] / "charts/memcached"  # ships values.schema.json
    watch = Watch(
        "cache.example.com", "v1alpha1", "Memcached", ChartRef(str(memcached), memcached), "memcacheds"
    )
    helm = FakeHelm(Storage())
    rt = runtime(helm)
    bad = run(rt, Resource(watch, "ns", "m", "uid", 1, {"size": "three"}, {}, {}))
    assert (bad.outcome.phase, bad.outcome.reason, helm.calls) == ("stalled", "InvalidValues", [])
    assert "spec.size: 'three' is not of type 'integer'" in bad.outcome.message
    rt = runtime(FakeHelm(Storage()))
    rt.draining = True
    draining = run(rt, cr({}))
    assert (draining.outcome.reason, rt.helm.calls) == ("ShuttingDown", [])  # type: ignore[attr-defined]


def settle(rt: Runtime, resource: Resource) -> str:
    """A reconcile, then what the handler does once the status is written: remember it settled."""
    result = run(rt, resource)
    if result.settled is not None:
        rt.settled[resource.ident.key] = replace(result.settled, status=status_digest(resource.status))
    return str(result.outcome.reason)


def decided(rt: Runtime, resource: Resource) -> bool:
    """A resync of ``resource`` decided from memory, as the sweep asks: with its status's digest."""
    return asyncio.run(unchanged(rt, resource, status_digest(resource.status)))


def test_a_resync_is_decided_from_memory_until_anything_it_relied_on_changes(monkeypatch: Any) -> None:
    helm = FakeHelm(Storage())
    rt = runtime(helm)
    index = ReleaseIndex(api=None)  # type: ignore[arg-type]  # fed by hand, never started
    index.listed(None, [])
    quiet = {"drift": True}

    async def nothing_deployed(*a: Any) -> None:  # a release in sync has its objects compared
        return None

    drift = SimpleNamespace(quiet=lambda *a: quiet["drift"], observe=nothing_deployed)
    rt = replace(rt, releases=index, drift=drift)
    resource = cr({"message": "hi"})
    settle(rt, resource)  # installs: an action is never remembered as settled
    assert not decided(rt, resource)
    assert settle(rt, resource) == "ReconciliationSucceeded"
    assert decided(rt, resource)
    # What the resync sweep keeps of it (no spec, no status, a digest of the status) decides alike.
    slim, digest = kept(resource), status_digest(resource.status)
    assert asyncio.run(unchanged(rt, slim, digest))
    assert not asyncio.run(unchanged(rt, slim, status_digest({"conditions": []})))
    assert not decided(rt, replace(resource, generation=2))  # the spec changed
    assert not decided(rt, replace(resource, status={"conditions": []}))  # not as written
    quiet["drift"] = False  # an object of the release changed since its last check
    assert not decided(rt, resource)
    quiet["drift"] = True
    secret = {"metadata": {"namespace": "ns", "name": "sh.helm.release.v1.t.v2", "labels": {"name": "t"}}}
    index.changed("ADDED", secret)  # someone ran helm by hand
    assert not decided(rt, resource)
    assert settle(rt, resource) == "ReconciliationSucceeded"  # read the storage again
    assert decided(rt, resource)
    monkeypatch.setattr("helm_operator.runtime.settled.FULL_READ_EVERY", 0.0)  # too long on the watches alone
    assert not decided(rt, resource)
    monkeypatch.undo()
    index.lost(None)  # the storage watch broke: nothing is trusted
    assert not decided(rt, resource)
    assert helm.calls == ["upgrade"]


class _Drift:
    """The drift checker's part of a reconcile: a comparison that finds ``found``; what the
    correction announces and applies is recorded."""

    def __init__(self, found: Any) -> None:
        self.found, self.announced = found, []  # type: list[Any]

    async def observe(self, *a: Any) -> Any:
        return self.found

    def announcer(self, watch: Any, ref: Any, conditions: Any, generation: int) -> Any:
        async def announce(drifts: Any) -> None:
            self.announced.append(drifts)

        return announce


def test_a_drifted_release_in_sync_is_corrected_by_the_action_runner() -> None:
    """Drift is a state the decision sees: its correction is ``Action.CORRECT_DRIFT``, run from
    the ``ACTIONS`` table (no Helm call, no new revision, no outcome Event: the objects' own
    Events say what was re-asserted), its status announced before it starts."""
    from helm_operator.drift.check import Correction, DriftReport
    from helm_operator.drift.diff import ObjectDrift

    helm = FakeHelm(Storage())
    applied: list[tuple[Any, str]] = []
    rt = runtime(helm)
    rt.kube.apply = lambda doc, ns, dry_run=False: applied.append((doc, ns))  # type: ignore[attr-defined]
    resource = cr({"message": "hi"})
    run(rt, resource)  # installed
    drift = ObjectDrift("v1", "ConfigMap", "ns", "t", paths=("/data/message",))
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "t"}}
    for mode, corrected in [("enabled", True), ("warn", False)]:
        applied.clear()
        found = DriftReport(mode, (drift,), corrections=(Correction(doc, drift, "ns"),))
        checker = _Drift(found)
        rt = replace(rt, drift=checker)  # type: ignore[arg-type]
        result = run(rt, resource)
        assert (result.outcome.phase, result.outcome.reason) == ("ready", "ReconciliationSucceeded")
        assert result.outcome.action is None and helm.calls == ["upgrade"]  # no Helm action
        assert result.drift is not None and result.drift.corrected is corrected
        assert result.events == ()
        assert applied == ([(doc, "ns")] if corrected else [])
        assert checker.announced == ([(drift,)] if corrected else [])
        assert result.announced is corrected  # the status is written: "Correcting" is replaced


def test_no_drift_or_no_comparison_decides_nothing() -> None:
    from helm_operator.drift.check import DriftReport

    helm = FakeHelm(Storage())
    rt = runtime(helm)
    resource = cr({"message": "hi"})
    run(rt, resource)
    for found in [DriftReport("enabled"), DriftReport("disabled"), None]:  # None: paused, not read
        rt = replace(rt, drift=_Drift(found))  # type: ignore[arg-type]
        result = run(rt, resource)
        assert result.outcome.reason == "ReconciliationSucceeded" and result.drift == found
        assert not result.announced and helm.calls == ["upgrade"]


def test_a_record_deleted_during_the_uninstall_still_deletes_what_lies_outside_the_namespace() -> None:
    """The namespace controller may delete Helm's release Secret between our read of it and Helm's:
    Helm then finds no record and deletes nothing, so the cluster-scoped objects are found by the
    owner label and deleted, as when the record was gone before."""
    from helm_operator.runtime.finalize import finalize

    helm = FakeHelm(Storage())
    rt = runtime(helm)
    watch = replace(WATCH, allow_cluster_scoped=True)
    assert run(rt, replace(cr({"message": "hi"}), watch=watch)).outcome.reason == "InstallSucceeded"
    vanishing = helm.storage

    async def uninstall(*a: Any, **kw: Any) -> bool:  # the record goes just before Helm reads it
        helm.calls.append("uninstall")
        vanishing.revisions = []
        return False

    helm.uninstall = uninstall  # type: ignore[method-assign]
    deleted: list[tuple[str, str]] = []
    role = SimpleNamespace(
        group="rbac.authorization.k8s.io",
        version="v1",
        plural="clusterroles",
        kind="ClusterRole",
        namespaced=False,
    )
    rt.discovery = SimpleNamespace(deletable=lambda: [role], scopes=dict)  # type: ignore[assignment]

    def delete_labelled(
        group: str, version: str, plural: str, namespaced: bool, selector: str, ns: str
    ) -> list[str]:
        deleted.append((plural, selector))
        return ["t-exporter"]

    rt.kube.delete_labelled = delete_labelled  # type: ignore[attr-defined]
    said, _ = asyncio.run(finalize(rt, watch, "ns", "t"))
    assert helm.calls[-1] == "uninstall"
    owner = identify(watch, "ns", "t").owner
    assert deleted == [("clusterroles", f"{OWNER_LABEL}={owner}")], deleted
    assert said == (
        "release t: its record went during the uninstall; deleted 1 object(s) it left outside its namespace: "
        "ClusterRole/t-exporter"
    ), said


def test_the_last_try_allowed_is_given_up_on_at_once_not_after_a_backoff() -> None:
    """After the 5th failure the resource is looked at again at once (and stalls, RetriesExhausted),
    not after the next backoff (80 s by default: Stalled lagged that long)."""
    helm = FakeHelm(Storage())
    rt = runtime(helm)
    run(rt, cr({"message": "one"}))
    helm.fail = HelmError("HelmFailed", "the API server said no")
    run(rt, cr({"message": "two"}, generation=2))
    rt.attempts["ns/t"] = replace(rt.attempts["ns/t"], failures=3, last_attempt=1.0)  # due again
    fourth = run(rt, cr({"message": "two"}, generation=2))
    assert (fourth.outcome.reason, fourth.retry_after) == ("UpgradeFailed", 60)  # the cap
    rt.attempts["ns/t"] = replace(rt.attempts["ns/t"], last_attempt=1.0)
    fifth = run(rt, cr({"message": "two"}, generation=2))
    assert (fifth.outcome.reason, fifth.retry_after, fifth.attempts.failures) == ("UpgradeFailed", 1.0, 5)
    assert run(rt, cr({"message": "two"}, generation=2)).outcome.reason == "RetriesExhausted"


def test_a_rollback_goes_to_the_last_deployed_revision_never_to_a_failed_one() -> None:
    """Helm's "previous revision" of a failed one may be failed too (an upgrade refused twice):
    the rollback names the revision that last ran, so it never redeploys values that failed."""
    helm = FakeHelm(Storage())
    rt = runtime(helm)
    run(rt, cr({"message": "one"}))  # revision 1, deployed
    helm.fail = HelmError("HelmFailed", "the API server said no")
    helm.rollback = _refused  # type: ignore[method-assign]
    failed = run(rt, cr({"message": "two"}, generation=2))
    assert failed.outcome.remediation is not None and not failed.outcome.remediation.succeeded
    revisions = helm.storage.revisions
    revisions[0].status = "deployed"  # as real Helm leaves it when the upgrade fails
    revisions.append(Revision(3, "failed", revisions[1].digest, revisions[1].owner))  # a failed rollback
    helm.rollback = FakeHelm.rollback.__get__(helm)  # type: ignore[method-assign]
    rt.attempts.clear()
    again = run(rt, cr({"message": "two"}, generation=2))
    assert helm.calls[-1] == "rollback 1", helm.calls
    assert again.outcome.action == "rollback" and again.outcome.remediation.succeeded  # type: ignore[union-attr]


async def _refused(*a: Any, **kw: Any) -> None:
    raise HelmError("HelmFailed", "rollback refused")


def test_an_action_asked_of_a_kind_without_hooks_is_warned_about_once_per_request() -> None:
    """No hooks module serves the kind: nothing would run the action, so the request gets one
    Warning (not one per resync), a new request another, and one made again after its removal too."""
    told: dict[str, str] = {}

    def asked(request: str | None) -> list[str]:
        annotations = {ACTION_ANNOTATION: request} if request is not None else {}
        return [
            f"{e.reason}: {e.message}"
            for e in unheard_action(told, Resource(WATCH, "ns", "t", "u", 1, {}, {}, annotations))
        ]

    first = asked("backup-now")
    assert len(first) == 1 and first[0].startswith("UnknownAction: helm-operator.io/action: 'backup-now'"), (
        first
    )
    assert "Tiny has no day-2 hooks" in first[0] and "remove the annotation" in first[0], first
    assert asked("backup-now") == []  # a resync, or another change of the resource
    assert len(asked("switchover=t-1")) == 1
    assert asked(None) == [] and told == {identify(WATCH, "ns", "t").key: ""}
    assert len(asked("switchover=t-1")) == 1  # asked again after it was removed


def test_a_short_action_reads_nothing_for_a_deletion_and_a_long_one_sees_it(monkeypatch: Any) -> None:
    from helm_operator.runtime.acting import deletion_watch

    monkeypatch.setattr("helm_operator.runtime.acting.DELETION_FIRST", 0.3)
    monkeypatch.setattr("helm_operator.runtime.acting.DELETION_POLL", 0.05)
    reads: list[float] = []
    deleted: dict[str, Any] = {}

    def get_custom(ref: Any, plural: str) -> dict[str, Any]:
        reads.append(time.monotonic())
        return {"metadata": dict(deleted)}

    rt = runtime(FakeHelm(Storage()))
    rt.kube = SimpleNamespace(get_custom=get_custom)  # type: ignore[assignment]

    async def action(seconds: float, delete_after: float | None = None) -> tuple[bool, float]:
        began = time.monotonic()
        async with deletion_watch(rt, cr({})) as abort:
            if delete_after is not None:
                await asyncio.sleep(delete_after)
                deleted["deletionTimestamp"] = "now"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(abort.wait(), seconds)
        return abort.is_set(), time.monotonic() - began

    assert asyncio.run(action(0.1)) == (False, pytest.approx(0.1, abs=0.08))
    assert reads == []  # over before the first look
    seen, after = asyncio.run(action(5.0, delete_after=0.4))
    assert seen and 0.4 <= after < 1.0  # the first look at 0.3 s, then every 0.05 s
    assert len(reads) >= 2
