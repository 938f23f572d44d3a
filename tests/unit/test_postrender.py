from __future__ import annotations

import io
import sys

import yaml

from helm_operator.postrender import args_for, main, mark
from helm_operator.release.state import OWNER_LABEL

REF = {"apiVersion": "app.example.com/v1", "kind": "AppService", "name": "a", "uid": "u-1"}


def test_marks_every_object_and_respects_keep_and_scope() -> None:
    docs = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"x": "1"}}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s", "annotations": {"helm.sh/resource-policy": "keep"}},
        },
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "elsewhere", "namespace": "other"}},
        None,
    ]
    out = mark(docs, "owner-1", REF, "ns")
    assert len(out) == 4
    assert all(d["metadata"]["labels"][OWNER_LABEL] == "owner-1" for d in out)
    assert out[0]["metadata"]["labels"]["x"] == "1"
    assert out[0]["metadata"]["ownerReferences"] == [REF]
    assert [("ownerReferences" in d["metadata"]) for d in out[1:]] == [False, False, False]


def test_marking_twice_does_not_duplicate_the_reference() -> None:
    once = mark([{"kind": "ConfigMap", "metadata": {"name": "c"}}], "o", REF, "ns")
    assert mark(once, "o", REF, "ns")[0]["metadata"]["ownerReferences"] == [REF]


def test_main_reads_a_manifest_stream(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    stream = "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n---\n# only a comment\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(stream))
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["--owner", "o", "--namespace", "ns"]) == 0
    [doc] = list(yaml.safe_load_all(out.getvalue()))
    assert doc["metadata"]["labels"] == {OWNER_LABEL: "o"} and "ownerReferences" not in doc["metadata"]


def test_args_for_works_for_both_helm_majors() -> None:
    args = args_for("o", REF, "ns")
    assert args[:2] == ["--post-renderer", "helm-operator-postrender"]
    assert args.count("--post-renderer-args") == 3
