from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helm_operator.adapters.postrender import EXIT_VIOLATION, NAME, Server, args_for, install, main, mark
from helm_operator.core.naming import OWNER_LABEL
from helm_operator.core.tenancy import NOT_ENFORCED, TenantRules, scopes_with_crds, violations

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


def test_args_for_works_for_both_helm_majors(tmp_path: Path) -> None:
    args = args_for("o", REF, "ns", tmp_path / "scopes.json", TenantRules(allowed_namespaces=("b",)))
    assert args[:2] == ["--post-renderer", "helm-operator-postrender"]
    assert args.count("--post-renderer-args") == 5
    tenant = next(a for a in args if a.startswith("--tenant="))
    assert json.loads(tenant.split("=", 1)[1]) == {
        "enforce": True,
        "allowed_namespaces": ["b"],
        "allow_cluster_scoped": False,
    }
    assert "--tenant=" not in " ".join(args_for("o", None, "ns", None, NOT_ENFORCED))


def test_the_client_helm_starts_hands_the_stream_to_the_server_in_the_operator(tmp_path: Path) -> None:
    sock = install(tmp_path)
    client = tmp_path / "bin" / NAME
    stream = yaml.safe_dump_all([cm("a", None), cm("b", "kube-system")]).encode()
    args = ["--owner", "o", "--namespace", "ns", "--tenant={}"]

    def run(*argv: str, data: bytes = stream) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([str(client), *argv], input=data, capture_output=True, timeout=30)

    server = Server(sock).start()
    try:
        served = run(*args)
        assert served.returncode == EXIT_VIOLATION
        assert b"NamespaceViolation: ConfigMap/b targets namespace 'kube-system'" in served.stderr
        ok = run("--owner", "o", "--namespace", "ns", data=yaml.safe_dump(cm("a", None)).encode())
        assert ok.returncode == 0, ok.stderr
        [doc] = yaml.safe_load_all(ok.stdout)
        assert doc["metadata"]["labels"] == {OWNER_LABEL: "o"}
        # Arguments reach the server byte for byte (spaces, quotes, non-ASCII).
        scopes = tmp_path / "scopes é.json"
        scopes.write_text(json.dumps({"/ConfigMap": True}))
        ref = {"apiVersion": "x.io/v1", "kind": "Wéb", "name": "a b", "uid": 'u "1"'}
        owned = run(
            "--owner",
            "o",
            "--namespace",
            "ns",
            "--owner-ref=" + json.dumps(ref),
            f"--scopes={scopes}",
            data=yaml.safe_dump(cm("a", None)).encode(),
        )
        assert owned.returncode == 0, owned.stderr
        assert yaml.safe_load(owned.stdout)["metadata"]["ownerReferences"] == [ref]
        bad = run("--namespace", "ns")
        assert bad.returncode == 2 and b"the following arguments are required: --owner" in bad.stderr
    finally:
        server.close()
    # No server (no operator): the client runs the whole post-renderer itself, with the same answer.
    alone = run("--owner", "o", "--namespace", "ns", data=yaml.safe_dump(cm("a", None)).encode())
    assert alone.returncode == 0, alone.stderr
    assert yaml.safe_load(alone.stdout)["metadata"]["labels"] == {OWNER_LABEL: "o"}
