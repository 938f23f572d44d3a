"""The path a new user takes, end to end on the real control plane, each step timed.

``helm-operator init`` → ``create-api`` three times (a chart with a large values.schema.json and
nullable enums, one without a schema, one with cluster-scoped RBAC and a CRD in ``crds/``; written
the way public charts are: ``default "" … | quote``, ``namespaceOverride``, hook Jobs, HPA, PDB,
kinds with irregular plurals) → the one line a user adds to watches.yaml (``allowClusterScoped``
for the exporter) → ``helm-operator rbac`` → ``kubectl apply`` of the CRDs, ``config/`` and the
generated samples → the operator runs **as the generated ServiceAccount** (a token from ``kubectl
create token``, leader election as the Deployment runs it) → every sample Ready, nothing forbidden
→ the samples deleted and uninstalled by the same operator.

``HELM_OPERATOR_CLI`` names a ``helm-operator`` executable to use instead of this checkout's (e.g.
one installed from a wheel into a fresh virtualenv). The timings are printed (``pytest -s``).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .operator import REPO, eventually, free_port

CHARTS = REPO / "tests/e2e/charts"


def cli() -> list[str]:
    given = os.environ.get("HELM_OPERATOR_CLI")
    return [given] if given else [sys.executable, "-m", "helm_operator.cli"]


class Steps:
    """Runs and times each step; the table is printed at the end, whatever happened."""

    def __init__(self) -> None:
        self.times: list[tuple[str, float]] = []

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.times.append((what, time.monotonic() - started))

    def report(self) -> str:
        width = max(len(w) for w, _ in self.times)
        lines = [f"  {w.ljust(width)}  {s:6.2f} s" for w, s in self.times]
        total = sum(s for _, s in self.times)
        return "\n".join(["new-user path timings:", *lines, f"  {'total'.ljust(width)}  {total:6.2f} s"])


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*cli(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"helm-operator {' '.join(args)} (exit {proc.returncode}):\n{proc.stderr}"
    return proc


def sa_kubeconfig(cluster: DevCluster, name: str, namespace: str, path: Path) -> Path:
    """A kubeconfig authenticating as a ServiceAccount (a 1 h token), as a Pod of the Deployment."""
    token = cluster.kubectl("create", "token", name, "-n", namespace, "--duration", "1h").stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    server = next(c for c in admin["clusters"] if c["name"] == context["cluster"])["cluster"]
    user = f"system:serviceaccount:{namespace}:{name}"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "local", "cluster": server}],
                "users": [{"name": user, "user": {"token": token}}],
                "contexts": [{"name": "sa", "context": {"cluster": "local", "user": user}}],
                "current-context": "sa",
            }
        )
    )
    return path


def ready(cluster: DevCluster, namespace: str, refs: list[str]) -> bool:
    for ref in refs:
        out = cluster.kubectl("get", ref, "-n", namespace, "-o", "json", check=False)
        if out.returncode != 0:
            return False
        obj = json.loads(out.stdout)
        conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions", [])}
        if conds.get("Ready", {}).get("status") != "True":
            return False
    return True


@pytest.mark.timeout(900)
def test_init_create_api_rbac_apply_and_all_ready_as_the_generated_service_account(
    cluster: DevCluster, tools: Toolchain, solo_namespace: str, tmp_path: Path
) -> None:
    tools.require("helm")
    ns = solo_namespace
    name = f"shop{os.urandom(2).hex()}"  # its namespace, ClusterRole and groups are this run's own
    project = tmp_path / name
    env = {**os.environ, "HELM_OPERATOR_HELM": str(tools.helm)}
    kinds = [
        # (group, kind, chart, plural)
        (f"proxy.{name}.example.com", "IngressProxy", "ingressproxy", "ingressproxies"),
        (f"apps.{name}.example.com", "WebAnalytics", "analytics", "webanalytics"),
        (f"monitoring.{name}.example.com", "KubeStateMetrics", "statemetrics", "kubestatemetrics"),
    ]
    steps = Steps()
    operator: subprocess.Popen[bytes] | None = None
    log = tmp_path / "operator.log"
    try:
        with steps.step("init"):
            run("init", str(project), "--name", name, cwd=tmp_path, env=env)
        for group, kind, chart, plural in kinds:
            with steps.step(f"create-api {kind}"):
                out = run(
                    "create-api", "--group", group, "--version", "v1", "--kind", kind,
                    "--chart", str(CHARTS / chart), cwd=project, env=env,
                )  # fmt: skip
            assert f"wrote crds/{plural}.{group}.yaml" in out.stdout, out.stdout
        assert len(yaml.safe_load((project / "watches.yaml").read_text())) == 3

        # The exporter's ClusterRole is cluster-scoped: its owner says it may be (one line).
        text = (project / "watches.yaml").read_text()
        assert text.endswith("kind: KubeStateMetrics\n  chart: charts/kubestatemetrics\n"), text
        (project / "watches.yaml").write_text(text + "  allowClusterScoped: true\n")

        with steps.step("rbac"):
            out = run(
                "rbac", "--watches-file", "watches.yaml", "--out", "config/02-rbac.yaml", cwd=project, env=env
            )
        assert "charts/kubestatemetrics creates from its crds/ folder CustomResourceDefinition" in out.stderr
        assert (
            "# Note: charts/kubestatemetrics creates from its crds/ folder"
            in (project / "config/02-rbac.yaml").read_text()
        )

        with steps.step("kubectl apply crds/ config/"):
            deployment = project / "config/03-deployment.yaml"
            applied = [str(p) for p in sorted((project / "config").glob("*.yaml")) if p != deployment]
            cluster.kubectl("apply", "-f", str(project / "crds"), *[a for p in applied for a in ("-f", p)])
            dry = cluster.kubectl("apply", "--dry-run=server", "-f", str(deployment))
            assert "created (server dry run)" in dry.stdout, dry.stdout + dry.stderr
            for group, _, _, plural in kinds:
                cluster.kubectl(
                    "wait", "--for=condition=Established", f"crd/{plural}.{group}", "--timeout=60s"
                )

        with steps.step("kubectl apply samples/"):
            cluster.kubectl("apply", "-n", ns, "-f", str(project / "samples"))
        refs = [f"{plural}.{group}/{kind.lower()}-sample" for group, kind, _, plural in kinds]

        with steps.step("operator start (as the ServiceAccount)"):
            kubeconfig = sa_kubeconfig(cluster, name, f"{name}-system", tmp_path / "sa-kubeconfig")
            helm_home = {
                f"HELM_{d}_HOME": str(tmp_path / f"helm-{d.lower()}") for d in ("CACHE", "CONFIG", "DATA")
            }
            operator = subprocess.Popen(
                [
                    *cli(), "run", "--watches-file", "watches.yaml", "--kubeconfig", str(kubeconfig),
                    "--helm", str(tools.helm), "--namespace", ns,
                    "--leader-elect", "--leader-election-namespace", f"{name}-system",
                ],
                cwd=project,
                env={**env, **helm_home},
                stdout=log.open("wb"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
            eventually(
                lambda: (
                    "Initial authentication has finished" in log.read_text() or operator.poll() is not None
                ),
                timeout=60,
                what="operator start",
            )
            assert operator.poll() is None, log.read_text()
        with steps.step("all three Ready"):
            eventually(lambda: ready(cluster, ns, refs), timeout=300, interval=1, what=f"{refs} Ready")

        for ref in refs:
            obj = json.loads(cluster.kubectl("get", ref, "-n", ns, "-o", "json").stdout)
            assert obj["status"]["release"]["revision"] == 1, obj["status"]
        # What the charts made, the exporter's cluster-wide objects and the CRD of its crds/ included.
        for what in (
            "deployment/ingressproxy-sample-controller",
            "horizontalpodautoscaler/ingressproxy-sample-controller",
            "poddisruptionbudget/ingressproxy-sample-controller",
            "role/ingressproxy-sample",
            "deployment/webanalytics-sample",
            "horizontalpodautoscaler/webanalytics-sample",
            "poddisruptionbudget/webanalytics-sample",
            "deployment/kubestatemetrics-sample",
        ):
            cluster.kubectl("get", what, "-n", ns)
        exporter_role = f"clusterrole/kubestatemetrics-sample-{hashlib.sha256(ns.encode()).hexdigest()[:8]}"
        cluster.kubectl("get", exporter_role)
        crd = json.loads(
            cluster.kubectl(
                "get",
                "crd",
                "metricsconfigs.statemetrics.e2e.helm-operator.io",
                "-o",
                "json",
                "--show-managed-fields",
            ).stdout
        )
        assert "helm" in {m["manager"] for m in crd["metadata"]["managedFields"]}

        with steps.step("kubectl delete samples/ (uninstalled)"):
            cluster.kubectl("delete", "-n", ns, "-f", str(project / "samples"), "--timeout=180s", timeout=200)
        gone = cluster.kubectl("get", exporter_role, check=False)
        assert gone.returncode != 0, gone.stdout
        assert "forbidden" not in log.read_text().lower(), log.read_text()
    finally:
        if operator is not None and operator.poll() is None:
            # Uninstalled by the operator (its finalizer), so nothing cluster-wide stays behind.
            samples = str(project / "samples")
            cluster.kubectl("delete", "-n", ns, "-f", samples, "--timeout=120s", check=False, timeout=150)
            stop_operator(operator)
        print("\n" + steps.report())
        if (project / "crds").is_dir():
            cluster.kubectl("delete", "-f", str(project / "crds"), "--wait=false", check=False)
        for what in (f"clusterrole/{name}", f"clusterrolebinding/{name}", f"namespace/{name}-system"):
            cluster.kubectl("delete", what, "--wait=false", check=False)


def readme_converters() -> str:
    """The converter module docs/api-versions.md's "Evolving an API" shows, as a user copies it."""
    text = (REPO / "docs/api-versions.md").read_text()
    section = text[text.index("## Evolving an API") :]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def start_operator(
    project: Path, kubeconfig: Path, ns: str, system: str, log: Path, env: dict[str, str], *extra: str
) -> subprocess.Popen[bytes]:
    """The operator as the Deployment runs it (its namespace in POD_NAMESPACE, leader election),
    logged in as the generated ServiceAccount."""
    operator = subprocess.Popen(
        [
            *cli(), "run", "--watches-file", "watches.yaml", "--kubeconfig", str(kubeconfig),
            "--namespace", ns, "--leader-elect", *extra,
        ],
        cwd=project,
        env={**env, "POD_NAMESPACE": system},
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    eventually(
        lambda: "Initial authentication has finished" in log.read_text() or operator.poll() is not None,
        timeout=60,
        what="operator start",
    )
    assert operator.poll() is None, log.read_text()
    return operator


def stop_operator(operator: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the operator finishes what runs), SIGKILL after a minute."""
    if operator.poll() is None:
        operator.send_signal(signal.SIGTERM)
        try:
            operator.wait(60)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait()


@pytest.mark.timeout(900)
def test_a_second_api_version_added_with_create_api_and_converted_by_the_readme_s_converters(
    cluster: DevCluster, tools: Toolchain, solo_namespace: str, tmp_path: Path
) -> None:
    """A kind served as v1 (chart 1.x, ``message``) gains v2 (chart 2.x renamed it ``greeting.text``)
    the way docs/api-versions.md's "Evolving an API" says: ``create-api --version v2``, the converters
    copied from that page, ``rbac`` again, the operator as its ServiceAccount; the v1 resource keeps its
    meaning through the v2 chart, the generated v2 sample applies, both read in both versions, and
    the storage moves to v2 with ``migrate-storage``."""
    tools.require("helm")
    ns = solo_namespace
    name = f"greet{os.urandom(2).hex()}"
    group = f"greet.{name}.example.com"
    crd_name = f"greetings.{group}"
    project, system = tmp_path / name, f"{name}-system"
    env = {**os.environ, "HELM_OPERATOR_HELM": str(tools.helm)}
    env |= {f"HELM_{d}_HOME": str(tmp_path / f"helm-{d.lower()}") for d in ("CACHE", "CONFIG", "DATA")}
    log = tmp_path / "operator.log"
    operator: subprocess.Popen[bytes] | None = None

    def get(version: str, obj: str) -> dict[str, Any]:
        out = cluster.kubectl("get", f"greetings.{version}.{group}", obj, "-n", ns, "-o", "json")
        return dict(json.loads(out.stdout))

    def text_of(release: str) -> str:
        cm = cluster.kubectl("get", "configmap", f"{release}-greeting", "-n", ns, "-o", "json")
        return str(json.loads(cm.stdout)["data"]["text"])

    def apply_config() -> None:
        deployment = project / "config/03-deployment.yaml"
        files = [str(p) for p in sorted((project / "config").glob("*.yaml")) if p != deployment]
        cluster.kubectl("apply", "-f", str(project / "crds"), *[a for p in files for a in ("-f", p)])
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd_name}", "--timeout=60s")

    try:
        run("init", str(project), "--name", name, cwd=tmp_path, env=env)
        run(
            "create-api", "--group", group, "--version", "v1", "--kind", "Greeting",
            "--chart", str(CHARTS / "greeting-v1"), cwd=project, env=env,
        )  # fmt: skip
        run("rbac", "--watches-file", "watches.yaml", "--out", "config/02-rbac.yaml", cwd=project, env=env)
        apply_config()
        v1_sample = yaml.safe_load((project / "samples/greeting.yaml").read_text())
        v1_sample["spec"] = {"message": "hello"}
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(v1_sample))
        first = v1_sample["metadata"]["name"]
        kubeconfig = sa_kubeconfig(cluster, name, system, tmp_path / "sa-kubeconfig")
        operator = start_operator(project, kubeconfig, ns, system, log, env)
        eventually(lambda: ready(cluster, ns, [f"greetings.{group}/{first}"]), timeout=120, what="v1 Ready")
        assert text_of(first) == "hello"
        stop_operator(operator)

        # The operator's next version: v2 from chart 2.x, converters from docs/api-versions.md, rbac again.
        out = run(
            "create-api", "--group", group, "--version", "v2", "--kind", "Greeting",
            "--chart", str(CHARTS / "greeting-v2"), cwd=project, env=env,
        )  # fmt: skip
        said = out.stdout + out.stderr
        assert "serves v1, v2 and stores v1" in said and "for v1 -> v2, v2 -> v1 (" in said, said
        served = yaml.safe_load(next((project / "crds").glob(f"{crd_name}.yaml")).read_text())
        assert {v["name"]: (v["served"], v["storage"]) for v in served["spec"]["versions"]} == {
            "v1": (True, True),
            "v2": (True, False),
        }, served["spec"]["versions"]
        (project / "hooks/greeting.py").write_text(readme_converters())
        text = (project / "watches.yaml").read_text()
        assert text.endswith("kind: Greeting\n  chart: charts/greeting-v2\n"), text
        (project / "watches.yaml").write_text(text + "  hooks: hooks/greeting.py\n")
        run("rbac", "--watches-file", "watches.yaml", "--out", "config/02-rbac.yaml", cwd=project, env=env)
        apply_config()
        port = free_port()
        operator = start_operator(
            project, kubeconfig, ns, system, log, env, "--conversion-bind-address", f"127.0.0.1:{port}"
        )
        eventually(
            lambda: (
                json.loads(cluster.kubectl("get", "crd", crd_name, "-o", "json").stdout)["spec"]["conversion"]
                .get("webhook", {})
                .get("clientConfig", {})
                .get("url")
                == f"https://127.0.0.1:{port}/convert"
            ),
            timeout=60,
            what="the CRD converting through the operator's webhook",
        )
        # The v1 resource feeds chart 2.x through its v2 form: the same text, a second revision.
        eventually(
            lambda: get("v1", first)["status"].get("release", {}).get("chartRef") == "greeting-2.0.0",
            timeout=120,
            what=f"{first} on chart 2.0.0",
        )
        assert text_of(first) == "hello" and get("v2", first)["status"]["release"]["revision"] == 2
        assert get("v2", first)["spec"] == {"greeting": {"text": "hello"}}
        # The generated v2 sample, with emphasis: Ready, and its v1 form round-trips.
        v2_sample = yaml.safe_load((project / "samples/greeting-v2.yaml").read_text())
        v2_sample["spec"] = {"greeting": {"text": "hi", "emphasis": True}}
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(v2_sample))
        second = v2_sample["metadata"]["name"]
        assert second != first
        eventually(lambda: ready(cluster, ns, [f"greetings.{group}/{second}"]), timeout=120, what="v2 Ready")
        assert text_of(second) == "hi!"
        assert get("v1", second)["spec"] == {"message": "hi"}

        # Storage moves to v2 as step 4 of docs/api-versions.md says: crds/ edited and applied, then migrated.
        path = next((project / "crds").glob(f"{crd_name}.yaml"))
        doc = yaml.safe_load(path.read_text())
        for v in doc["spec"]["versions"]:
            v["storage"] = v["name"] == "v2"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        cluster.kubectl("apply", "-f", str(path))
        migrated = subprocess.run(
            [*cli(), "migrate-storage", crd_name, "--kubeconfig", str(cluster.kubeconfig)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert migrated.returncode == 0 and "2 objects stored as v2" in migrated.stdout, migrated
        crd_now = json.loads(cluster.kubectl("get", "crd", crd_name, "-o", "json").stdout)
        assert crd_now["status"]["storedVersions"] == ["v2"], crd_now["status"]
        assert get("v1", first)["spec"] == {"message": "hello"}
        assert "forbidden" not in log.read_text().lower(), log.read_text()
    finally:
        if operator is not None and operator.poll() is None:
            cluster.kubectl(
                "delete", f"greetings.{group}", "--all", "-n", ns, "--timeout=120s", check=False, timeout=150
            )  # fmt: skip
        if operator is not None:
            stop_operator(operator)
        cluster.kubectl("delete", "crd", crd_name, "--wait=false", check=False)
        for what in (f"clusterrole/{name}", f"clusterrolebinding/{name}", f"namespace/{system}"):
            cluster.kubectl("delete", what, "--wait=false", check=False)
