"""config/ deploys the operator with exactly the permissions it needs, and no more.

There is no container runtime here (KWOK Pods run no process), so the Deployment itself is only
validated by the API server (dry run, Pod Security "restricted"); everything else in config/ is
applied, and the operator runs as a local process **as its ServiceAccount** (a token from
``kubectl create token``), with helm using the same credentials. Every sample then goes through
install, upgrade and drift correction, and uninstall, with no request forbidden; a request outside
the RBAC is forbidden.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain
from helm_operator.scaffold import rbac, sources

from .operator import REPO, OperatorProcess, eventually, shipped_watches
from .test_samples import CASES

CONFIG = REPO / "config"
RBAC_COMMAND = "helm-operator rbac --watches-file watches.yaml --out config/02-rbac.yaml"


def config_docs() -> list[dict[str, Any]]:
    return [d for p in sorted(CONFIG.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]


OPERATOR_NS = next(d for d in config_docs() if d["kind"] == "Namespace")["metadata"]["name"]
SERVICE_ACCOUNT = next(d for d in config_docs() if d["kind"] == "ServiceAccount")["metadata"]["name"]


def samples() -> list[dict[str, Any]]:
    """The shipped samples, with EtcdCluster's scheduled snapshots off: its 30-minute slot would
    otherwise fall inside this test now and then, and a snapshot Job waiting for an S3 Secret that
    does not exist here holds the release (as every hook does), so drift correction waits for it."""
    docs = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "samples").glob("*.yaml"))]
    for doc in docs:
        if doc["kind"] == "EtcdCluster":
            doc["spec"]["backup"]["backupIntervalInSecond"] = 0
    return docs


# The sample kinds' resource, spec change and workload, shared with test_samples.
CASE_OF_KIND = {yaml.safe_load((REPO / "samples" / c.sample).read_text())["kind"]: c for c in CASES.values()}


def case_of(cr: dict[str, Any]) -> Any:
    case = CASE_OF_KIND.get(cr["kind"])
    assert case is not None, (
        f"samples/ has a {cr['kind']} that tests/e2e/test_samples.py CASES does not cover"
    )
    return case


def resource_of(cr: dict[str, Any]) -> str:
    return str(case_of(cr).resource)


def wait_all_ready(cluster: DevCluster, ns: str, crs: list[dict[str, Any]], timeout: int = 300) -> None:
    """One ``kubectl wait`` for all of them (each at its current generation)."""
    refs = [f"{resource_of(cr)}/{cr['metadata']['name']}" for cr in crs]

    def ready() -> bool:
        for ref in refs:
            obj = json.loads(cluster.kubectl("get", ref, "-n", ns, "-o", "json").stdout)
            conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions", [])}
            ready = conds.get("Ready", {})
            if (
                ready.get("status") != "True"
                or ready.get("observedGeneration") != obj["metadata"]["generation"]
            ):
                return False
        return True

    eventually(ready, timeout=timeout, what=f"{', '.join(refs)} Ready", interval=2)


@pytest.fixture(scope="module")
def deployed(cluster: DevCluster, crds: None) -> Iterator[None]:
    """config/ applied but for the Deployment (dry-run only: no container runtime here)."""
    applied = [d for d in config_docs() if d["kind"] != "Deployment"]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(applied))
    dry = cluster.kubectl("apply", "--dry-run=server", "-f", str(CONFIG / "03-deployment.yaml"))
    assert "created (server dry run)" in dry.stdout, dry.stdout + dry.stderr
    assert "PodSecurity" not in dry.stderr, dry.stderr  # the namespace enforces "restricted"
    yield
    # The namespace stays (the session's cluster goes away, or is a developer's to keep).


def sa_kubeconfig(cluster: DevCluster, path: Path) -> Path:
    """A kubeconfig that authenticates as the operator's ServiceAccount (a 1 h token)."""
    token = cluster.kubectl("create", "token", SERVICE_ACCOUNT, "-n", OPERATOR_NS, "--duration", "1h")
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    server = next(c for c in admin["clusters"] if c["name"] == context["cluster"])["cluster"]
    user = f"system:serviceaccount:{OPERATOR_NS}:{SERVICE_ACCOUNT}"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "local", "cluster": server}],
                "users": [{"name": user, "user": {"token": token.stdout.strip()}}],
                "contexts": [{"name": "operator", "context": {"cluster": "local", "user": user}}],
                "current-context": "operator",
            }
        )
    )
    return path


def test_committed_rbac_is_what_the_charts_and_hooks_need(
    tools: Toolchain, cluster: DevCluster, crds: None
) -> None:
    """config/02-rbac.yaml is regenerated output: the same offline and through API discovery."""
    tools.require("helm")
    offline = sources.Options(watches_file=REPO / "watches.yaml", helm=str(tools.helm))
    docs, _ = sources.generate(offline)
    assert rbac.render_yaml(docs, RBAC_COMMAND) == (CONFIG / "02-rbac.yaml").read_text(), (
        f"config/02-rbac.yaml is out of date: run `{RBAC_COMMAND}`"
    )
    discovered, _ = sources.generate(
        sources.Options(
            watches_file=REPO / "watches.yaml", helm=str(tools.helm), kubeconfig=str(cluster.kubeconfig)
        )
    )
    assert discovered == docs


@pytest.mark.timeout(900)
def test_operator_runs_as_its_service_account(
    cluster: DevCluster, deployed: None, tools: Toolchain, solo_namespace: str, tmp_path: Path
) -> None:
    namespace = solo_namespace  # its own operator: no shared operator watches s-*
    tools.require("helm")
    kubeconfig = sa_kubeconfig(cluster, tmp_path / "sa-kubeconfig")

    def as_operator(*args: str) -> Any:
        return cluster.kubectl("--kubeconfig", str(kubeconfig), *args, check=False)

    # Outside the RBAC: forbidden. Inside: allowed (the Lease only in its own namespace).
    for args in (
        ("get", "nodes"),
        (
            "create",
            "clusterrolebinding",
            "x",
            "--clusterrole=cluster-admin",
            f"--serviceaccount={namespace}:default",
        ),
        ("delete", "namespace", namespace, "--dry-run=server"),
    ):
        denied = as_operator(*args)
        assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), (args, denied.stderr)
    for verb, what, ns, answer in (
        ("create", "deployments.apps", namespace, "yes"),
        ("create", "leases.coordination.k8s.io", OPERATOR_NS, "yes"),
        ("create", "leases.coordination.k8s.io", namespace, "no"),
        ("create", "nodes", "", "no"),
        ("escalate", "clusterroles.rbac.authorization.k8s.io", "", "no"),
    ):
        flags = ["-n", ns] if ns else []
        assert as_operator("auth", "can-i", verb, what, *flags).stdout.strip() == answer, (verb, what, ns)

    watches = tmp_path / "watches.yaml"
    watches.write_text(yaml.safe_dump(shipped_watches()))
    workdir = tmp_path / "operator"
    workdir.mkdir()
    # As config/03-deployment.yaml runs it: with leader election, the Lease in the operator's namespace.
    election = [
        "--leader-elect",
        "--leader-election-namespace",
        OPERATOR_NS,
        "--leader-election-id",
        namespace,
    ]
    op = OperatorProcess(
        cluster,
        tools.helm,
        workdir,
        watches,
        [namespace],
        extra_args=["--retry-base", "1", "--retry-cap", "4", *election],
        kubeconfig=kubeconfig,
    )
    op.start()
    try:
        lease = cluster.kubectl("get", "lease", namespace, "-n", OPERATOR_NS, "-o", "json")
        assert json.loads(lease.stdout)["spec"]["holderIdentity"], lease.stdout
        crs = samples()
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(crs))
        wait_all_ready(cluster, namespace, crs)

        # Upgrade: every sample's spec changes at once; each gets revision 2 and its workload follows.
        changed = []
        for cr in crs:
            case = case_of(cr)
            changed.append({**cr, "spec": {**(cr.get("spec") or {}), **case.change}})
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(changed))
        wait_all_ready(cluster, namespace, changed)
        for cr in changed:
            case = case_of(cr)
            name = cr["metadata"]["name"]
            status = json.loads(
                cluster.kubectl("get", case.resource, name, "-n", namespace, "-o", "json").stdout
            )
            assert status["status"]["release"]["revision"] == 2, (name, status["status"]["release"])
            kind, path = case.workload
            live = cluster.kubectl("get", kind, name, "-n", namespace, "-o", f"jsonpath={path}").stdout
            assert live == case.expected, (name, live)

        # Drift: each sample's workload deleted -> recreated (as the ServiceAccount), no new revision.
        uids = {}
        for cr in changed:
            kind = case_of(cr).workload[0]
            name = cr["metadata"]["name"]
            uids[(kind, name)] = cluster.kubectl(
                "get", kind, name, "-n", namespace, "-o", "jsonpath={.metadata.uid}"
            ).stdout
            cluster.kubectl("delete", kind, name, "-n", namespace, "--wait=false")

        def recreated() -> bool:
            for (kind, name), uid in uids.items():
                out = cluster.kubectl(
                    "get", kind, name, "-n", namespace, "-o", "jsonpath={.metadata.uid}", check=False
                )
                if out.returncode != 0 or out.stdout in ("", uid):
                    return False
            return True

        eventually(recreated, timeout=120, what="deleted workloads recreated", interval=1)
        for cr in changed:
            res = resource_of(cr)
            obj = json.loads(
                cluster.kubectl("get", res, cr["metadata"]["name"], "-n", namespace, "-o", "json").stdout
            )
            assert obj["status"]["release"]["revision"] == 2

        # Uninstall (with the PostgreSQLCluster's final backup Job) as the ServiceAccount too.
        for cr in changed:
            cluster.kubectl(
                "delete", resource_of(cr), cr["metadata"]["name"], "-n", namespace, "--wait=false"
            )
        for cr in changed:
            cluster.kubectl(
                "wait",
                "--for=delete",
                f"{resource_of(cr)}/{cr['metadata']['name']}",
                "-n",
                namespace,
                "--timeout=180s",
                timeout=190,
            )
        log = op.log()
        assert "forbidden" not in log.lower(), "the operator was refused something:\n" + "\n".join(
            line for line in log.splitlines() if "forbidden" in line.lower()
        )
    finally:
        op.stop()
