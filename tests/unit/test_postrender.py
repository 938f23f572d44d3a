from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.adapters import postrender
from helm_operator.adapters.postrender import (
    EXIT_VIOLATION,
    NAME,
    Exchange,
    argv_for,
    flags_for,
    install,
    main,
    mark,
)
from helm_operator.core.naming import OWNER_LABEL
from helm_operator.core.tenancy import NOT_ENFORCED, TenantRules, scopes_with_crds, violations
from helm_operator.release.record import ObjectId

REF = {"apiVersion": "app.example.com/v1", "kind": "AppService", "name": "a", "uid": "u-1"}
SCOPES = {
    "/ConfigMap": True,
    "/Secret": True,
    "/Namespace": False,
    "rbac.authorization.k8s.io/ClusterRole": False,
    "apps/Deployment": True,
}


def cm(name: str, namespace: str | None = None) -> dict:
    meta: dict = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def test_marks_every_object_and_respects_keep_and_scope() -> None:
    docs = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"x": "1"}}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s", "annotations": {"helm.sh/resource-policy": "keep"}},
        },
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}},
        cm("elsewhere", "other"),
        {"apiVersion": "example.com/v9", "kind": "Unknown", "metadata": {"name": "u"}},
        None,
    ]
    out = mark(docs, "owner-1", REF, "ns", SCOPES)
    assert len(out) == 5
    assert all(d["metadata"]["labels"][OWNER_LABEL] == "owner-1" for d in out)
    assert out[0]["metadata"]["labels"]["x"] == "1"
    assert out[0]["metadata"]["ownerReferences"] == [REF]
    # kept, cluster-scoped, another namespace, unknown kind: no reference that could not resolve
    assert [("ownerReferences" in d["metadata"]) for d in out[1:]] == [False, False, False, False]


def test_scopes_come_from_crds_rendered_alongside() -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "kubestatemetrics.monitoring.example.com"},
        "spec": {
            "group": "monitoring.example.com",
            "scope": "Cluster",
            "names": {"kind": "KubeStateMetrics"},
        },
    }
    scopes = scopes_with_crds(SCOPES, [crd])
    ksm = {"apiVersion": "monitoring.example.com/v1", "kind": "KubeStateMetrics", "metadata": {"name": "k"}}
    assert scopes["monitoring.example.com/KubeStateMetrics"] is False
    assert "ownerReferences" not in mark([ksm], "o", REF, "ns", scopes)[0]["metadata"]


def test_marking_twice_does_not_duplicate_the_reference() -> None:
    once = mark([cm("c")], "o", REF, "ns", SCOPES)
    assert mark(once, "o", REF, "ns", SCOPES)[0]["metadata"]["ownerReferences"] == [REF]


def test_tenant_rules_name_every_object_out_of_bounds() -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}}
    docs = [cm("here"), cm("same", "a"), cm("escape", "kube-system"), cm("team", "team-b"), role]
    found = violations(docs, "a", SCOPES, TenantRules())
    assert [str(v) for v in found] == [
        "NamespaceViolation: ConfigMap/escape targets namespace 'kube-system'; allowed: a",
        "NamespaceViolation: ConfigMap/team targets namespace 'team-b'; allowed: a",
        "ClusterScopedNotAllowed: ClusterRole/r is cluster-scoped; the watch does not set allowClusterScoped",
    ]
    relaxed = TenantRules(allowed_namespaces=("team-*",), allow_cluster_scoped=True)
    assert [v.message.split(" ")[0] for v in violations(docs, "a", SCOPES, relaxed)] == ["ConfigMap/escape"]
    assert violations(docs, "a", SCOPES, NOT_ENFORCED) == []


def test_main_reads_a_manifest_stream_and_refuses_violations(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scopes = tmp_path / "scopes.json"
    scopes.write_text(json.dumps(SCOPES))
    stream = "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n---\n# only a comment\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(stream))
    assert main(["--owner", "o", "--namespace", "ns", f"--scopes={scopes}", "--tenant={}"]) == 0
    [doc] = list(yaml.safe_load_all(capsys.readouterr().out))
    assert doc["metadata"]["labels"] == {OWNER_LABEL: "o"} and "ownerReferences" not in doc["metadata"]

    monkeypatch.setattr(sys, "stdin", io.StringIO(yaml.safe_dump(cm("x", "kube-system"))))
    assert main(["--owner", "o", "--namespace", "ns", f"--scopes={scopes}", "--tenant={}"]) == EXIT_VIOLATION
    out = capsys.readouterr()
    assert out.out == ""
    assert "helm-operator: NamespaceViolation: ConfigMap/x targets namespace 'kube-system'" in out.err


def test_flags_work_for_both_helm_majors(tmp_path: Path) -> None:
    argv = argv_for("o", REF, "ns", tmp_path / "scopes.json", TenantRules(allowed_namespaces=("b",)))
    tenant = next(a for a in argv if a.startswith("--tenant="))
    assert json.loads(tenant.split("=", 1)[1]) == {
        "enforce": True,
        "allowed_namespaces": ["b"],
        "allow_cluster_scoped": False,
    }
    assert "--tenant=" not in " ".join(argv_for("o", None, "ns", None, NOT_ENFORCED))
    flags = flags_for(argv)
    assert flags[:2] == ["--post-renderer", NAME]
    assert flags[3::2] == argv and flags.count("--post-renderer-args") == len(argv) == 5


def _run_script(script: Path, argv: list[str], stream: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(script), *argv], input=stream, capture_output=True, timeout=30)


def test_the_script_helm_starts_hands_the_stream_to_the_operator(tmp_path: Path) -> None:
    install(tmp_path)
    script = tmp_path / "plugins" / NAME / NAME
    # Several pipe buffers' worth, so both sides must keep reading while the other writes.
    big = [{**cm(f"c{i}"), "data": {"k": "v" * 2000}} for i in range(100)]
    stream = yaml.safe_dump_all(big).encode()
    scopes = tmp_path / "scopes.json"
    scopes.write_text(json.dumps(SCOPES))
    argv = argv_for("o", REF, "ns", scopes, NOT_ENFORCED)

    async def served(argv: list[str], stream: bytes) -> tuple[subprocess.CompletedProcess[bytes], Exchange]:
        exchange = Exchange(tmp_path / "calls", argv)
        async with exchange.serving():
            done = await asyncio.to_thread(_run_script, script, flags_for(argv, exchange)[3::2], stream)
        assert not exchange.path.exists()  # every call cleans up after itself
        return done, exchange

    async def twice() -> list[subprocess.CompletedProcess[bytes]]:
        exchange = Exchange(tmp_path / "calls", argv)
        async with exchange.serving():
            flags = flags_for(argv, exchange)[3::2]
            return [await asyncio.to_thread(_run_script, script, flags, stream) for _ in range(2)]

    # A helm that post-rendered twice in one call would be answered twice, never left waiting.
    assert [(c.returncode, c.stdout.count(b"kind: ConfigMap")) for c in asyncio.run(twice())] == [
        (0, 100)
    ] * 2

    done, exchange = asyncio.run(served(argv, stream))
    assert done.returncode == 0, done.stderr
    docs = list(yaml.safe_load_all(done.stdout))
    assert [d["metadata"]["name"] for d in docs] == [f"c{i}" for i in range(100)]
    assert all(d["metadata"]["labels"] == {OWNER_LABEL: "o"} for d in docs)
    assert docs[0]["metadata"]["ownerReferences"] == [REF] and exchange.verdict == ""
    assert exchange.objects == tuple(ObjectId("v1", "ConfigMap", None, f"c{i}") for i in range(100))

    refused, exchange = asyncio.run(
        served(
            argv_for("o", None, "ns", None, TenantRules()), yaml.safe_dump(cm("b", "kube-system")).encode()
        )
    )
    assert refused.returncode == EXIT_VIOLATION and refused.stdout == b""
    found = "helm-operator: NamespaceViolation: ConfigMap/b targets namespace 'kube-system'"
    assert found in refused.stderr.decode() and found in exchange.verdict
    assert exchange.objects is None  # nothing rendered: nothing named

    bad, exchange = asyncio.run(served(["--namespace=ns"], stream))
    assert bad.returncode == 2 and "the following arguments are required: --owner" in exchange.verdict


def test_an_ended_call_leaves_nothing_waiting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(tmp_path)
    script = tmp_path / "bin" / NAME

    async def helm_fails_before_post_rendering() -> Exchange:
        exchange = Exchange(tmp_path / "calls", argv_for("o", None, "ns", None, NOT_ENFORCED))
        async with exchange.serving():
            await asyncio.sleep(0.05)
        return exchange

    started = time.monotonic()
    assert not asyncio.run(helm_fails_before_post_rendering()).path.exists()
    assert time.monotonic() - started < 5

    def slow_render(argv: object, stream: bytes) -> tuple[int, bytes, str, tuple[object, ...]]:
        time.sleep(2)
        return 0, stream, "", ()

    monkeypatch.setattr(postrender, "_render", slow_render)

    async def helm_stopped_while_post_rendering() -> subprocess.CompletedProcess[bytes]:
        exchange = Exchange(tmp_path / "calls", argv_for("o", None, "ns", None, NOT_ENFORCED))
        async with exchange.serving():
            proc = await asyncio.create_subprocess_exec(
                str(script),
                *flags_for(exchange.argv, exchange)[3::2],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            assert proc.stdin is not None
            proc.stdin.write(yaml.safe_dump(cm("a")).encode())
            proc.stdin.close()
            await asyncio.sleep(0.5)  # the stream is in; the script waits for its answer
        out, err = await asyncio.wait_for(proc.communicate(), 5)
        return subprocess.CompletedProcess([], proc.returncode or 0, out, err)

    stopped = asyncio.run(helm_stopped_while_post_rendering())
    assert stopped.returncode == 1 and stopped.stdout == b""
    assert b"the operator's post-renderer gave no answer" in stopped.stderr


def test_without_the_operator_the_script_post_renders_by_itself(tmp_path: Path) -> None:
    install(tmp_path)
    script = tmp_path / "bin" / NAME
    scopes = tmp_path / "scopes é.json"  # arguments reach it byte for byte
    scopes.write_text(json.dumps({"/ConfigMap": True}))
    ref = {"apiVersion": "x.io/v1", "kind": "Wéb", "name": "a b", "uid": 'u "1"'}
    argv = argv_for("o", ref, "ns", scopes, NOT_ENFORCED)
    for flags in (argv, [f"--exchange={tmp_path / 'calls' / 'gone'}", *argv]):
        alone = _run_script(script, flags, yaml.safe_dump(cm("a")).encode())
        assert alone.returncode == 0, alone.stderr
        meta = yaml.safe_load(alone.stdout)["metadata"]
        assert meta["labels"] == {OWNER_LABEL: "o"} and meta["ownerReferences"] == [ref]


def test_the_objects_named_are_those_helm_keeps_in_the_manifest() -> None:
    hook = {**cm("migrate"), "metadata": {"name": "migrate", "annotations": {"helm.sh/hook": "pre-upgrade"}}}
    other = {**cm("elsewhere"), "metadata": {"name": "elsewhere", "namespace": "ns"}}
    stream = yaml.safe_dump_all([cm("a"), hook, other, {"kind": ""}, None]).encode()
    code, _, _, objects = postrender._render(argv_for("o", None, "ns", None, NOT_ENFORCED), stream)
    assert code == 0
    assert objects == (ObjectId("v1", "ConfigMap", None, "a"), ObjectId("v1", "ConfigMap", "ns", "elsewhere"))


def test_a_controller_reference_is_ours_unless_the_object_already_has_a_controller() -> None:
    """In a ControllerRing the resource controls what its chart creates (the sharder keys them to
    its shard by that reference); an object the chart gave a controller of its own keeps it."""
    ref = {**REF, "controller": True}
    mine = mark([cm("c")], "o", ref, "ns", SCOPES)[0]["metadata"]["ownerReferences"]
    assert mine == [ref]
    other = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-9", "controller": True}
    owned = cm("d")
    owned["metadata"]["ownerReferences"] = [other]
    refs = mark([owned], "o", ref, "ns", SCOPES)[0]["metadata"]["ownerReferences"]
    assert refs == [other, REF], refs


TRICKY = """\
---
# Source: web/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web, "version": "1.0"}
  annotations:
    note: "ünïcode, a: colon"
spec:
  replicas: 3
  selector:
    matchLabels: &sel {app: web}
  template:
    metadata:
      labels: *sel
    spec:
      containers:
        - name: web
          image: "nginx:1.25"
          args: ["--port", "8080", "yes", "0x1F", "1e3"]
          env:
            - {name: N, value: "3"}
            - name: SCRIPT
              value: |
                set -e
                echo "a && b"
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: tick
  labels:
spec:
  schedule: "*/5 * * * *"
  jobTemplate:
    spec:
      template:
        spec: {restartPolicy: Never, containers: [{name: t, image: busybox}]}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: hook
  annotations: {"helm.sh/hook": pre-install}
spec:
  template:
    metadata: ~
    spec: {restartPolicy: Never, containers: [{name: h, image: busybox}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: plain}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: p, image: busybox}]}}}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: kept
  annotations: {helm.sh/resource-policy: keep}
data: {"1": one, "true": "false", empty: "", nothing: null, date: 2024-01-01}
---
apiVersion: v1
kind: Secret
metadata:
  name: owned
  ownerReferences:
    - {apiVersion: v1, kind: ConfigMap, name: other, uid: other-uid, controller: true}
    - {apiVersion: app.example.com/v1, kind: AppService, name: a, uid: u-1}
stringData: {k: v}
---
# a comment only
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reader}
rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {kind: Widget, plural: widgets}
  versions: [{name: v1, served: true, storage: true}]
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
---
apiVersion: v1
kind: Service
metadata:
  name: elsewhere
  namespace: other
spec: {ports: [{port: 80}]}
"""


def _both_paths(monkeypatch: pytest.MonkeyPatch, argv: list[str], stream: str) -> tuple[Any, Any]:
    """The render on YAML nodes (the usual path) and on Python objects (the fallback)."""
    nodes = postrender._render(argv, stream.encode())
    with monkeypatch.context() as m:

        def unusual(manifest: bytes) -> Any:
            raise postrender._Unusual

        m.setattr(postrender, "_documents", unusual)
        objects = postrender._render(argv, stream.encode())
    return nodes, objects


@pytest.mark.parametrize("shard", ["", "blue"])
def test_the_node_path_marks_exactly_as_the_object_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, shard: str
) -> None:
    """Every object, pod template, kept object, existing controller and scope of the tricky stream
    comes out of the node path as the object path makes it: the same values once loaded (what
    Helm applies), the same objects named for the release's manifest."""
    scopes = tmp_path / "scopes.json"
    scopes.write_text(json.dumps({**SCOPES, "batch/CronJob": True, "batch/Job": True, "/Service": True}))
    argv = ["--owner", "o", "--namespace", "ns", f"--scopes={scopes}", f"--owner-ref={json.dumps(REF)}"]
    (code, out, err, ids), (code2, out2, err2, ids2) = _both_paths(
        monkeypatch, [*argv, f"--shard={shard}"], TRICKY
    )
    assert (code, err) == (code2, err2) == (0, "")
    assert list(yaml.safe_load_all(out)) == list(yaml.safe_load_all(out2))
    assert ids == ids2 and len(ids) == 9  # the hook Job is kept apart from the manifest
    docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(out)}
    assert docs["web"]["spec"]["template"]["metadata"]["labels"][OWNER_LABEL] == "o"
    assert docs["web"]["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "--port",
        "8080",
        "yes",
        "0x1F",
        "1e3",
    ]
    assert docs["tick"]["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"] == {OWNER_LABEL: "o"}
    assert docs["hook"]["spec"]["template"]["metadata"]["labels"] == {OWNER_LABEL: "o"}
    assert "metadata" not in docs["plain"]["spec"]["template"]  # a plain Job's template is immutable
    assert (
        "ownerReferences" not in docs["kept"]["metadata"]
        and "ownerReferences" not in docs["reader"]["metadata"]
    )
    assert "ownerReferences" not in docs["w"]["metadata"]  # cluster-scoped by the CRD beside it
    assert "ownerReferences" not in docs["elsewhere"]["metadata"]
    refs = docs["owned"]["metadata"]["ownerReferences"]
    assert [r["uid"] for r in refs] == ["other-uid", "u-1"] and "controller" not in refs[1]
    assert docs["kept"]["data"] == {
        "1": "one",
        "true": "false",
        "empty": "",
        "nothing": None,
        "date": dt.date(2024, 1, 1),
    }
    if shard:
        assert all(d["metadata"]["labels"]["sharding.helm-operator.io/shard"] == shard for d in docs.values())


@pytest.mark.parametrize(
    "stream",
    [
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  <<: {name: merged, labels: {a: b}}\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: twice, name: again}\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\nkind: ConfigMap\n",
    ],
    ids=["merge-key", "duplicate-key", "duplicate-top-key"],
)
def test_what_the_node_path_cannot_mark_exactly_goes_through_the_object_path(
    monkeypatch: pytest.MonkeyPatch, stream: str
) -> None:
    argv = ["--owner", "o", "--namespace", "ns"]
    with pytest.raises(postrender._Unusual):
        postrender._documents(stream.encode())
    (code, out, _, ids), (code2, out2, _, ids2) = _both_paths(monkeypatch, argv, stream)
    assert code == code2 == 0 and out == out2 and ids == ids2
    [doc] = list(yaml.safe_load_all(out))
    assert doc["metadata"]["labels"][OWNER_LABEL] == "o"


def test_a_violation_is_refused_on_the_node_path_too() -> None:
    stream = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: kube-system}\n"
    tenant = json.dumps({"enforce": True, "allowed_namespaces": [], "allow_cluster_scoped": False})
    code, out, err, ids = postrender._render(
        ["--owner", "o", "--namespace", "ns", f"--tenant={tenant}"], stream.encode()
    )
    assert (code, out, ids) == (EXIT_VIOLATION, b"", ())
    assert "NamespaceViolation: ConfigMap/x targets namespace 'kube-system'" in err
