"""The core operator on the real control plane: install, upgrade, no-op resync, restart, delete,
and the failure paths (schema, render, Helm errors, a killed operator)."""

from __future__ import annotations

import json
import os
import re
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helm_operator.core.naming import OWNER_LABEL, owner_id, release_name
from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import Helm, releases, tiny
from .operator import OperatorProcess, Resources, eventually
from .pace import within

KIND = "tinies.test.helm-operator.io"


def history(helm: Helm, name: str, ns: str) -> list[dict[str, Any]]:
    out = helm("history", name, "-n", ns, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else []


def upgrades(op: OperatorProcess, name: str, namespace: str) -> list[str]:
    """The helm upgrades of one release (the session operator serves many namespaces: a release
    of the same name elsewhere is not this one)."""
    return [
        c for c in op.helm_calls() if c.startswith(f"upgrade {name} ") and f"--namespace {namespace}" in c
    ]


def warnings(res: Resources, name: str, reason: str) -> int:
    """Warning Events of ``reason`` about the resource, each as often as it was said."""
    return sum(
        int(e.get("count") or 1) for e in res.events(name) if e["type"] == "Warning" and e["reason"] == reason
    )


def own_operator(
    cluster: DevCluster, tools: Toolchain, watches: Path, workdir: Path, namespaces: list[str]
) -> OperatorProcess:
    """An operator of the test's own (helm v4): tests that stop, kill or restart one never touch
    the session's."""
    tools.require("helm")
    workdir.mkdir(exist_ok=True)
    return OperatorProcess(cluster, tools.helm, workdir, watches, namespaces)


@pytest.fixture
def solo(
    cluster: DevCluster, crds: None, tools: Toolchain, e2e_watches: Path, solo_namespace: str, tmp_path: Path
) -> Iterator[tuple[OperatorProcess, Resources]]:
    """An operator of the test's own, started, over a namespace no other operator watches."""
    op = own_operator(cluster, tools, e2e_watches, tmp_path / "op", [solo_namespace])
    op.start()
    try:
        yield op, Resources(cluster, solo_namespace)
    finally:
        op.stop()


def lifecycle(
    op: OperatorProcess, res: Resources, helm: Helm, cluster: DevCluster, dedicated: bool = False
) -> None:
    """apply → Ready; change → one upgrade; unchanged/restart → no helm; delete → all gone.

    ``dedicated``: nobody else uses this operator, so after the restart not one helm process at all
    may start (a shared operator is only checked for this resource's release).
    """
    ns = res.ns
    res.apply(tiny("web", message="one", replicas=2))
    res.wait_condition(KIND, "web", "Ready")
    rel = releases(helm, ns)["web"]
    assert (rel["status"], rel["revision"]) == ("deployed", "1")
    # The spec plus the watch's overrideValues (with $TINY_TAG expanded from the operator's environment).
    assert json.loads(helm("get", "values", "web", "-n", ns, "-o", "json").stdout) == {
        "message": "one",
        "replicas": 2,
        "image": "registry.example/tiny:2.0",
    }
    deployment = res.get("deployment", "web")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/tiny:2.0"
    # Ownership marks from the post-renderer: the owner label and an ownerReference to the CR.
    cr_uid = res.get(KIND, "web")["metadata"]["uid"]
    for obj in (deployment, res.get("configmap", "web-config")):
        assert obj["metadata"]["labels"][OWNER_LABEL] == owner_id("test.helm-operator.io", "Tiny", ns, "web")
        assert [(r["kind"], r["name"], r["uid"]) for r in obj["metadata"]["ownerReferences"]] == [
            ("Tiny", "web", cr_uid)
        ]
    assert res.get("configmap", "web-config")["data"] == {"message": "one"}
    status = res.get(KIND, "web")["status"]
    assert status["release"]["revision"] == 1 and status["release"]["chart"] == "tiny"
    res.wait_event("web", "InstallSucceeded")

    calls = len(op.helm_calls())
    res.apply(tiny("web", message="two", replicas=2))
    eventually(
        lambda: (res.get(KIND, "web")["status"].get("release") or {}).get("revision") == 2, what="revision 2"
    )
    res.wait_condition(KIND, "web", "Ready")
    assert releases(helm, ns)["web"]["revision"] == "2"  # one new revision for the change
    assert res.get("configmap", "web-config")["data"] == {"message": "two"}
    # Upgrades only (one, or another after a helm call that failed on the way).
    mine = [c for c in op.helm_calls()[calls:] if " web " in c]
    assert mine and all(c.startswith("upgrade web ") for c in mine), mine
    # Helm 4 applies server-side with strict field validation: its client-side OpenAPI check is skipped.
    assert ("--disable-openapi-validation" in mine[0].split()) == (helm.major >= 4), mine

    calls = len(op.helm_calls())
    res.apply(tiny("web", message="two", replicas=2))  # the same spec again
    op.restart()
    eventually(lambda: op.handled("resume' succeeded") >= 1, what="resume handled after restart")
    after = op.helm_calls()[calls:]
    assert (after if dedicated else [c for c in after if " web " in c]) == []
    assert releases(helm, ns)["web"]["revision"] == "2"

    res.delete(KIND, "web")
    assert not res.exists(KIND, "web")
    assert "web" not in releases(helm, ns)
    assert not res.exists("configmap", "web-config") and not res.exists("deployment", "web")
    assert any(e["reason"] == "Uninstalled" for e in cluster_events(cluster, ns, "web"))


def cluster_events(cluster: DevCluster, ns: str, name: str) -> list[dict[str, Any]]:
    return Resources(cluster, ns).events(name)


def test_lifecycle_helm4(solo: tuple[OperatorProcess, Resources], helm4: Helm, cluster: DevCluster) -> None:
    op, res = solo  # it restarts the operator: one of its own
    lifecycle(op, res, helm4, cluster, dedicated=True)


def test_lifecycle_helm3(
    cluster: DevCluster, crds: None, tools: Toolchain, e2e_watches: Path, tmp_path: Path
) -> None:
    """The same core flow with an operator that drives helm v3."""
    tools.require("helm3")
    ns = f"h3-{os.urandom(3).hex()}"
    cluster.kubectl("create", "namespace", ns)
    op = OperatorProcess(cluster, tools.helm3, tmp_path, e2e_watches, [ns])
    op.start()
    pid = -1
    try:
        helm3 = Helm(tools.helm3, cluster, tmp_path / "client")
        assert helm3.major == 3
        lifecycle(op, Resources(cluster, ns), helm3, cluster, dedicated=True)
        upgrades = [c.split() for c in op.helm_calls() if c.startswith("upgrade")]
        assert upgrades and all("--labels" in c and c.count("--history-max") == 1 for c in upgrades)
        assert op.proc is not None
        pid = op.proc.pid  # after the restart inside lifecycle()
        assert list(Path(tempfile.gettempdir()).glob(f"helm-operator-{pid}-*"))  # its post-renderer
    finally:
        op.stop()
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    assert list(Path(tempfile.gettempdir()).glob(f"helm-operator-{pid}-*")) == []  # removed on exit


def test_schema_violation_stalls_without_helm_and_spares_others(
    operator: OperatorProcess, res: Resources
) -> None:
    calls = len(operator.helm_calls())
    res.apply(tiny("bad", replicas="three", nodeSelector={"zone": 1}))
    res.apply(tiny("good"))
    stalled = res.wait_condition(KIND, "bad", "Stalled")
    assert stalled["reason"] == "InvalidValues"
    assert "spec.replicas: 'three' is not of type 'integer'" in stalled["message"]
    assert "spec.nodeSelector.zone: 1 is not of type 'string'" in stalled["message"]
    assert res.condition(KIND, "bad", "Ready")["status"] == "False"
    res.wait_event("bad", "InvalidValues", "spec.replicas")
    res.wait_condition(KIND, "good", "Ready")
    assert not [c for c in operator.helm_calls()[calls:] if c.startswith("upgrade bad ")]

    res.apply(tiny("bad", replicas=1))  # fixed: reconciles normally
    res.wait_condition(KIND, "bad", "Ready")
    assert res.condition(KIND, "bad", "Stalled")["status"] == "False"


def test_render_failure_stalls_with_helms_error(operator: OperatorProcess, res: Resources) -> None:
    res.apply(tiny("broken", failRender="the chart refuses these values"))
    stalled = res.wait_condition(KIND, "broken", "Stalled")
    assert stalled["reason"] == "RenderFailed"
    assert "the chart refuses these values" in stalled["message"]
    res.wait_event("broken", "RenderFailed")
    # Deterministic failure: the resync (every 15s) does not run helm again for the same values
    # (it ran once, or again if a call failed another way first: then it stalled for good).
    tries, said, stalled_at, reads = (
        len(upgrades(operator, "broken", res.ns)),
        warnings(res, "broken", "RenderFailed"),
        time.monotonic(),
        operator.resyncs("read"),
    )
    assert tries >= 1 and said >= 1, (tries, said)
    eventually(
        lambda: operator.resyncs("read") > reads and time.monotonic() - stalled_at > 17,
        timeout=40,
        what="a resync that reads (a stalled resource is never decided from memory), a period on",
    )
    assert len(upgrades(operator, "broken", res.ns)) == tries
    # …and the status keeps saying why, without a new Event on every resync.
    stalled = res.condition(KIND, "broken", "Stalled")
    assert stalled["reason"] == "RenderFailed" and "the chart refuses these values" in stalled["message"]
    assert warnings(res, "broken", "RenderFailed") == said
    assert warnings(res, "broken", "RetriesExhausted") == 0


def test_an_action_asked_of_a_kind_without_hooks_is_warned_about_once(
    operator: OperatorProcess, res: Resources
) -> None:
    """No hooks module serves Tiny: an action request would otherwise sit there looking accepted."""
    res.apply(tiny("plain"))
    res.wait_condition(KIND, "plain", "Ready")
    res.cluster.kubectl("annotate", KIND, "plain", "-n", res.ns, "helm-operator.io/action=backup-now")
    said = res.wait_event("plain", "UnknownAction", "'backup-now'")
    assert said["type"] == "Warning" and "Tiny has no day-2 hooks" in said["message"], said

    def updates() -> int:
        return len(re.findall(rf"\[Tiny {res.ns}/plain\] Handler '[^']*/update' succeeded", operator.log()))

    handled = updates()
    res.cluster.kubectl("label", KIND, "plain", "-n", res.ns, "touched=yes")  # another turn of it
    eventually(lambda: updates() > handled, timeout=30, what="the label change handled")
    assert warnings(res, "plain", "UnknownAction") == 1
    assert res.condition(KIND, "plain", "Ready")["status"] == "True"


def test_an_unknown_field_in_the_chart_fails_the_install(operator: OperatorProcess, res: Resources) -> None:
    """Without Helm's client-side OpenAPI check, the API server's strict field validation still
    refuses a field the object's schema does not declare, and nothing of the release stays."""
    res.apply(tiny("typo", unknownField="dta"))
    ready = res.wait_condition(KIND, "typo", "Ready", status="False")
    assert ready["reason"] == "InstallFailed" and "dta" in ready["message"], ready
    assert "--disable-openapi-validation" in upgrades(operator, "typo", res.ns)[0].split()
    assert not res.exists("configmap", "typo-typo")


def test_long_dotted_name_gets_a_valid_release(
    operator: OperatorProcess, res: Resources, helm4: Helm
) -> None:
    name = "db.primary.eu-west-1.production.example.com.instance-0001a"  # 58 chars with dots
    assert len(name) > 53
    res.apply(tiny(name))
    res.wait_condition(KIND, name, "Ready")
    rel = release_name(name)
    assert rel != name and len(rel) <= 53 and "." not in rel
    assert releases(helm4, res.ns)[rel]["status"] == "deployed"
    assert res.get(KIND, name)["status"]["release"]["name"] == rel


def test_failed_upgrade_rolls_back_and_history_stays_bounded(
    operator: OperatorProcess, res: Resources, helm4: Helm
) -> None:
    res.apply(tiny("flaky", message="good"))
    res.wait_condition(KIND, "flaky", "Ready")
    installed = len(upgrades(operator, "flaky", res.ns))
    res.apply(tiny("flaky", message="bad", replicas=-1))  # the API server rejects the Deployment
    failed = res.wait_condition(KIND, "flaky", "Ready", status="False")
    assert failed["reason"] == "UpgradeFailed"
    remediated = res.wait_condition(KIND, "flaky", "Remediated", generation=False)
    assert "rolled back" in remediated["message"]
    # Retries back off and stop; the history never grows past historyMax (3). Each retry applies
    # the bad ConfigMap again before its Deployment is refused, so what a rollback restored is
    # read only once nothing retries any more: the last action was a rollback.
    stalled = res.wait_condition(KIND, "flaky", "Stalled", timeout=180)
    assert stalled["reason"] == "RetriesExhausted"
    assert "the last failure (UpgradeFailed): " in stalled["message"], stalled  # its cause stays named
    assert releases(helm4, res.ns)["flaky"]["status"] == "deployed"
    assert res.get("configmap", "flaky-config")["data"] == {"message": "good"}  # the rollback restored it
    assert len(history(helm4, "flaky", res.ns)) <= 3
    attempts = len(upgrades(operator, "flaky", res.ns)) - installed
    assert attempts == 5  # max-retries upgrades of the bad spec, each failure counted, then none
    res.wait_event("flaky", "RolledBack")


def start_held_upgrade(res: Resources, helm: Helm, name: str) -> str:
    """Install ``name``, then start an upgrade whose Pods stay Pending until a node carries the
    returned label, so `helm --wait` blocks and the release sits in pending-upgrade."""
    res.apply(tiny(name, message="before"))
    res.wait_condition(KIND, name, "Ready")
    label = f"hold-{res.ns[-4:]}"
    res.apply(tiny(name, message="after", nodeSelector={label: "yes"}))
    eventually(lambda: releases(helm, res.ns)[name]["status"] == "pending-upgrade", what="pending-upgrade")
    return label


def test_operator_killed_mid_upgrade_recovers(
    solo: tuple[OperatorProcess, Resources], helm4: Helm, cluster: DevCluster
) -> None:
    operator, res = solo
    label = start_held_upgrade(res, helm4, "crash")
    assert operator.proc is not None
    operator.stop(signal.SIGKILL, group=True)
    assert releases(helm4, res.ns)["crash"]["status"] == "pending-upgrade"

    cluster.kubectl("label", "node", "node-000000", f"{label}=yes")
    try:
        operator.start()
        res.wait_condition(KIND, "crash", "Ready", timeout=150)
        assert releases(helm4, res.ns)["crash"]["status"] == "deployed"
        assert res.get("configmap", "crash-config")["data"] == {"message": "after"}
        # Unlocked, then straight to the desired release: one new revision, no rollback in between.
        statuses = [(h["revision"], h["status"]) for h in history(helm4, "crash", res.ns)]
        assert statuses == [(1, "superseded"), (2, "failed"), (3, "deployed")]
        reasons = {e["reason"] for e in res.events("crash")}
        assert "Unlocked" in reasons and not reasons & {"UpgradeFailed", "RolledBack", "RollbackFailed"}
    finally:
        cluster.kubectl("label", "node", "node-000000", f"{label}-")


def test_sigterm_lets_a_running_upgrade_finish(
    solo: tuple[OperatorProcess, Resources], helm4: Helm, cluster: DevCluster
) -> None:
    operator, res = solo
    label = start_held_upgrade(res, helm4, "graceful")
    assert operator.proc is not None
    operator.proc.send_signal(signal.SIGTERM)
    try:
        eventually(
            lambda: "SIGTERM received: stopping" in operator.log(), timeout=10, what="SIGTERM received"
        )
        assert operator.proc.poll() is None, "the operator must wait for the running helm upgrade"
        cluster.kubectl("label", "node", "node-000001", f"{label}=yes")
        assert operator.stop(timeout=within(120)) == 0
        assert releases(helm4, res.ns)["graceful"]["status"] == "deployed"
        assert releases(helm4, res.ns)["graceful"]["revision"] == "2"
    finally:
        cluster.kubectl("label", "node", "node-000001", f"{label}-")


def test_namespace_deleted_while_operator_down_is_released(
    cluster: DevCluster, crds: None, tools: Toolchain, e2e_watches: Path, tmp_path: Path, helm4: Helm
) -> None:
    """kopf does not serve namespaces already terminating at start (once the namespace controller
    has written its conditions); the start-up sweep does. Either way the resource is released."""
    ns = f"s-gone-{os.urandom(3).hex()}"
    # Its own operator (it is stopped), over a pattern as the session's is (t-*), matching this alone.
    operator = own_operator(cluster, tools, e2e_watches, tmp_path / "op", [f"{ns}*"])
    cluster.kubectl("create", "namespace", ns)
    operator.start()
    try:
        res = Resources(cluster, ns)
        res.apply(tiny("orphan"))
        res.wait_condition(KIND, "orphan", "Ready")
        operator.stop()
        cluster.kubectl("delete", "namespace", ns, "--wait=false")
        eventually(
            lambda: (
                json.loads(cluster.kubectl("get", "namespace", ns, "-o", "json").stdout)["status"]["phase"]
                == "Terminating"
            ),
            what="namespace terminating",
        )
        operator.start()
        eventually(
            lambda: cluster.kubectl("get", "namespace", ns, "-o", "json", check=False).returncode != 0,
            timeout=90,
            what="namespace deleted",
        )
    finally:
        operator.stop()
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    # The namespace controller may have removed the release storage first; either way it is released.
    # A namespace listed before the namespace controller wrote its conditions is still served by
    # kopf, whose deletion handler releases it instead of the sweep.
    log = operator.log()
    swept = f"{ns}/orphan in terminating namespace: release orphan" in log
    handled = f"[Tiny {ns}/orphan] Deletion is processed: 1 succeeded" in log
    assert swept or handled, log[-3000:]


def test_remote_chart_from_a_repository_is_pulled_once(
    cluster: DevCluster, crds: None, tools: Toolchain, tmp_path: Path, helm4: Helm
) -> None:
    """`chart` + `repo` + `chartVersion`: pulled from a chart repository (served here on loopback)."""
    import functools
    import http.server
    import threading

    repo = tmp_path / "repo"
    repo.mkdir()
    helm4("package", str(Path(__file__).parent / "charts" / "tiny"), "-d", str(repo))
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(repo))
    )
    url = f"http://127.0.0.1:{server.server_address[1]}"
    helm4("repo", "index", str(repo), "--url", url)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    watches = tmp_path / "watches.yaml"
    watches.write_text(
        json.dumps(
            [
                {
                    "group": "test.helm-operator.io",
                    "version": "v1",
                    "kind": "Tiny",
                    "chart": "tiny",
                    "repo": url,
                    "chartVersion": "0.1.0",
                }
            ]
        )
    )
    ns = f"r-{os.urandom(3).hex()}"
    cluster.kubectl("create", "namespace", ns)
    (tmp_path / "op").mkdir()
    op = OperatorProcess(
        cluster,
        tools.helm,
        tmp_path / "op",
        watches,
        [ns],
        extra_args=["--chart-cache", str(tmp_path / "charts")],
    )
    try:
        op.start()
        res = Resources(cluster, ns)
        res.apply(tiny("remote", message="from a repo"))
        res.wait_condition(KIND, "remote", "Ready")
        assert releases(helm4, ns)["remote"]["chart"] == "tiny-0.1.0"
        assert res.get("configmap", "remote-config")["data"] == {"message": "from a repo"}
        pulled = [c for c in op.helm_calls() if c.startswith("pull ")]
        assert pulled, op.helm_calls()  # for the install (once, or again after a pull that failed)
        res.apply(tiny("remote", message="again"))
        eventually(
            lambda: res.get("configmap", "remote-config")["data"] == {"message": "again"}, what="upgrade"
        )
        res.wait_condition(KIND, "remote", "Ready")
        pulls = [c for c in op.helm_calls() if c.startswith("pull ")]
        assert pulls == pulled, pulls  # the pulled chart is reused
        calls = len(op.helm_calls())
        op.restart()  # the chart cache is on disk: nothing to pull, nothing to do
        eventually(lambda: op.handled("resume' succeeded") >= 1, what="resume after restart")
        assert op.helm_calls()[calls:] == []
    finally:
        op.stop()
        server.shutdown()
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
