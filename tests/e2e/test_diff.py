"""``helm-operator diff`` against the real control plane, the real helm (4 and 3) and the real
operator: a new resource lists every object as created, an applied one shows nothing and starts no
helm, a changed value shows exactly that field, manual drift shows as what the operator reverts,
and a bad file exits 2 saying why. The diff itself never changes the cluster.

These tests run their own operators (namespaces ``df4-*`` / ``df3-*``) so one can be stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import Helm, releases, tiny
from .operator import REPO, OperatorProcess, Resources, eventually

TINY = "tinies.test.helm-operator.io"


class Diff:
    """The command as a user runs it, with a helm that logs each of its invocations."""

    def __init__(self, cluster: DevCluster, helm: Path, watches: Path, workdir: Path) -> None:
        self.cluster, self.watches, self.workdir = cluster, watches, workdir
        self.calls = workdir / "diff-helm-calls.log"
        self.calls.touch()
        self.shim = workdir / "diff-helm"
        self.shim.write_text(f'#!/bin/sh\necho "$*" >> "{self.calls}"\nexec "{helm}" "$@"\n')
        self.shim.chmod(0o755)

    def __call__(
        self, docs: list[dict[str, Any]] | str, ns: str, *flags: str
    ) -> subprocess.CompletedProcess[str]:
        path = self.workdir / f"cr-{os.urandom(3).hex()}.yaml"
        path.write_text(docs if isinstance(docs, str) else yaml.safe_dump_all(docs))
        env = {
            **os.environ,
            "TINY_TAG": "2.0",  # the Tiny watch's overrideValues read it, as for the operator
            "HELM_CACHE_HOME": str(self.workdir / "helm-cache"),
            "HELM_CONFIG_HOME": str(self.workdir / "helm-config"),
            "HELM_DATA_HOME": str(self.workdir / "helm-data"),
        }
        cmd = [sys.executable, "-m", "helm_operator.cli", "diff", "-f", str(path), "-n", ns]
        cmd += ["--watches-file", str(self.watches), "--kubeconfig", str(self.cluster.kubeconfig)]
        cmd += ["--helm", str(self.shim), *flags]
        return subprocess.run(cmd, env=env, cwd=REPO, text=True, capture_output=True, timeout=180)

    def helm_calls(self) -> list[str]:
        return [line for line in self.calls.read_text().splitlines() if line.strip()]


def sections(out: str) -> dict[str, list[str]]:
    """The report's lines by the object they are about (``# <ref> …`` starts a section)."""
    found: dict[str, list[str]] = {}
    current = ""
    for line in out.splitlines():
        if line.startswith("# ") and not line.startswith("# note:"):
            current = line[2:].split(":")[0].split(" ")[0]
            found[current] = [line]
        elif current:
            found[current].append(line)
    return found


def edits(lines: list[str]) -> list[str]:
    """The changed lines of a unified diff (without its headers)."""
    return [line for line in lines if line[:1] in "+-" and not line.startswith(("---", "+++"))]


def replicas(res: Resources, name: str) -> int | None:
    return ((res.get("deployment", name) or {}).get("spec") or {}).get("replicas")


def state(res: Resources, name: str) -> dict[str, Any]:
    """What the diff must not change: the resource's generation and spec (the operator writes its
    status meanwhile), each object's resourceVersion."""
    cr = res.get(TINY, name) or {}
    objects = {"deployment": name, "configmap": f"{name}-config"}
    return {
        "resource": (cr.get("metadata", {}).get("generation"), cr.get("spec")),
        **{k: (res.get(k, n) or {}).get("metadata", {}).get("resourceVersion") for k, n in objects.items()},
    }


@pytest.fixture(scope="module")
def operators(
    cluster: DevCluster,
    crds: None,
    tools: Toolchain,
    e2e_watches: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, OperatorProcess]]:
    """One operator per helm major, started when a test first needs it."""
    started: dict[str, OperatorProcess] = {}

    class Lazy(dict[str, OperatorProcess]):
        def __missing__(self, major: str) -> OperatorProcess:
            tools.require("helm" if major == "helm4" else "helm3")
            binary = tools.helm if major == "helm4" else tools.helm3
            prefix = "df4" if major == "helm4" else "df3"
            op = OperatorProcess(
                cluster, binary, tmp_path_factory.mktemp(f"diff-{major}"), e2e_watches, [f"{prefix}-*"]
            )
            op.start()
            started[major] = self[major] = op
            return op

    yield Lazy()
    for op in started.values():
        op.stop()


def setup(
    major: str,
    operators: dict[str, OperatorProcess],
    cluster: DevCluster,
    tools: Toolchain,
    e2e_watches: Path,
    tmp_path: Path,
) -> tuple[OperatorProcess, Resources, Helm, Diff]:
    op = operators[major]
    ns = f"{'df4' if major == 'helm4' else 'df3'}-{os.urandom(3).hex()}"
    cluster.kubectl("create", "namespace", ns)
    binary = tools.helm if major == "helm4" else tools.helm3
    return (
        op,
        Resources(cluster, ns),
        Helm(binary, cluster, tmp_path / "client"),
        Diff(cluster, binary, e2e_watches, tmp_path),
    )


@pytest.mark.parametrize("major", ["helm4", "helm3"])
def test_new_then_applied_then_changed(
    major: str,
    operators: dict[str, OperatorProcess],
    cluster: DevCluster,
    tools: Toolchain,
    e2e_watches: Path,
    tmp_path: Path,
) -> None:
    _, res, helm, diff = setup(major, operators, cluster, tools, e2e_watches, tmp_path)
    ns, name = res.ns, "shop"
    cr = tiny(name, replicas=1, message="hi", nodeSelector={"type": "kwok"})  # KWOK's nodes match
    try:
        # (1) Not applied yet: every object would be created, the release installed; nothing is.
        new = diff([cr], ns)
        assert new.returncode == 1, new.stderr
        parts = sections(new.stdout)
        assert parts[f"Tiny/{ns}/{name}"][0].startswith(
            f"# Tiny/{ns}/{name}: new resource; release {ns}/{name} would be installed"
        )
        assert set(parts) == {f"Tiny/{ns}/{name}", f"Deployment/{ns}/{name}", f"ConfigMap/{ns}/{name}-config"}
        for ref in (f"Deployment/{ns}/{name}", f"ConfigMap/{ns}/{name}-config"):
            assert parts[ref][0] == f"# {ref} would be created"
            assert parts[ref][1:3] == [f"--- live/{ref}", f"+++ desired/{ref}"]
        deploy = "\n".join(parts[f"Deployment/{ns}/{name}"])
        # overrideValues applied, as the operator applies them
        assert "+      - image: registry.example/tiny:2.0" in deploy
        assert "helm-operator.io/owner" in deploy  # post-rendered as the operator installs it
        assert new.stdout.rstrip().splitlines()[-1] == (
            "Summary: resources: 1 new; objects: 2 to create, 0 to change, 0 to delete; "
            "releases: 1 to install"
        )
        assert [c.split()[0] for c in diff.helm_calls()] == ["version", "upgrade"]
        assert "--dry-run=server" in diff.helm_calls()[-1]
        assert releases(helm, ns) == {}
        assert not res.exists("deployment", name) and not res.exists(TINY, name)

        # (2) Applied and Ready: no change, no helm process, nothing touched.
        res.apply(cr)
        res.wait_condition(TINY, name, "Ready", timeout=180)
        before, revision = state(res, name), releases(helm, ns)[name]["revision"]
        calls = len(diff.helm_calls())
        same = diff([cr], ns)
        assert same.returncode == 0, same.stdout + same.stderr
        assert same.stdout.splitlines() == [
            f"# Tiny/{ns}/{name}: unchanged; no Helm action for release {ns}/{name} "
            "(release matches the desired chart and values)",
            "Summary: no changes (1 resource up to date)",
        ]
        assert len(diff.helm_calls()) == calls  # the digest matched: helm was not even started
        assert state(res, name) == before
        assert releases(helm, ns)[name]["revision"] == revision

        # (3) One value changed: exactly that field, in the resource and in its Deployment.
        changed = diff(
            [tiny(name, replicas=3, message="hi", nodeSelector={"type": "kwok"})], ns, "-o", "json"
        )
        assert changed.returncode == 1, changed.stderr
        [report] = json.loads(changed.stdout)["resources"]
        assert (report["state"], report["release"]["action"]) == ("changed", "upgrade")
        assert edits(report["diff"].splitlines()) == ["-  replicas: 1", "+  replicas: 3"]
        [change] = report["changes"]
        assert (change["action"], change["kind"], change["paths"]) == (
            "update",
            "Deployment",
            ["/spec/replicas"],
        )
        assert edits(change["diff"].splitlines()) == ["-  replicas: 1", "+  replicas: 3"]

        # (4) A value dropped: the field the chart no longer renders is removed (Helm 4 applies
        # server-side, Helm 3 by three-way merge; both remove it).
        dropped = diff([tiny(name, replicas=1, message="hi")], ns)
        assert dropped.returncode == 1, dropped.stderr
        parts = sections(dropped.stdout)
        assert set(parts) == {f"Tiny/{ns}/{name}", f"Deployment/{ns}/{name}"}
        deploy_lines = parts[f"Deployment/{ns}/{name}"]
        assert (
            deploy_lines[0] == f"# Deployment/{ns}/{name} would be changed: /spec/template/spec/nodeSelector"
        )
        assert edits(deploy_lines) == ["-      nodeSelector:", "-        type: kwok"]

        assert state(res, name) == before  # the dry-runs stored nothing
        assert releases(helm, ns)[name]["revision"] == revision
        assert replicas(res, name) == 1
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_manual_drift_shows_as_what_the_operator_reverts(
    operators: dict[str, OperatorProcess],
    cluster: DevCluster,
    tools: Toolchain,
    e2e_watches: Path,
    tmp_path: Path,
) -> None:
    """The operator corrects drift within a second, so it is stopped while the Deployment is
    scaled by hand; the diff says the unchanged resource's apply would bring replicas back (no Helm
    action: drift correction), and the operator, started again, does exactly that."""
    op, res, helm, diff = setup("helm4", operators, cluster, tools, e2e_watches, tmp_path)
    ns, name = res.ns, "drifty"
    cr = tiny(name, replicas=2)
    try:
        res.apply(cr)
        res.wait_condition(TINY, name, "Ready", timeout=180)
        revision = releases(helm, ns)[name]["revision"]
        op.stop()
        try:
            cluster.kubectl("scale", "deployment", name, "-n", ns, "--replicas=4")
            out = diff([cr], ns)
            assert out.returncode == 1, out.stderr
            parts = sections(out.stdout)
            assert parts[f"Tiny/{ns}/{name}"][0].startswith(f"# Tiny/{ns}/{name}: unchanged; no Helm action")
            assert set(parts) == {f"Tiny/{ns}/{name}", f"Deployment/{ns}/{name}"}
            deploy = parts[f"Deployment/{ns}/{name}"]
            assert deploy[0] == f"# Deployment/{ns}/{name} would be changed: /spec/replicas"
            assert edits(deploy) == ["-  replicas: 4", "+  replicas: 2"]
            assert replicas(res, name) == 4
        finally:
            op.start()
        eventually(lambda: replicas(res, name) == 2, what="drift corrected")
        assert releases(helm, ns)[name]["revision"] == revision
        after = diff([cr], ns)
        assert after.returncode == 0, after.stdout + after.stderr
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "apiVersion: test.helm-operator.io/v1\nkind: Tinny\nmetadata: {name: x}\n",
            "document 1: field 'kind': no watch serves Tinny (test.helm-operator.io/v1); watched: ",
        ),
        ("apiVersion: test.helm-operator.io/v1\nkind: Tiny\nmetadata: {name: x\n", "invalid YAML: "),
        (
            "apiVersion: test.helm-operator.io/v1\nkind: Tiny\nmetadata: {name: x}\n"
            "spec: {failRender: nope}\n",
            "document 1: Tiny/{ns}/x: RenderFailed: ",
        ),
    ],
    ids=["unknown-kind", "invalid-yaml", "render-error"],
)
def test_what_cannot_be_previewed_exits_2_saying_why(
    text: str,
    message: str,
    cluster: DevCluster,
    crds: None,
    tools: Toolchain,
    e2e_watches: Path,
    tmp_path: Path,
) -> None:
    ns = f"df-{os.urandom(3).hex()}"
    cluster.kubectl("create", "namespace", ns)
    try:
        out = Diff(cluster, tools.helm, e2e_watches, tmp_path)(text, ns)
        assert out.returncode == 2
        assert out.stdout == ""
        [line] = out.stderr.splitlines()[:1]
        assert line.startswith("helm-operator diff: ") and "cr-" in line and ".yaml: " in line
        assert message.format(ns=ns) in line
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
