"""The real local control plane, brought up once per test session.

Set HELM_OPERATOR_KUBECONFIG to reuse a cluster started with ``helm-operator dev up`` (fast local
iteration). Otherwise a fresh cluster is started and torn down at the end; if it cannot start,
every e2e test errors with the reason: nothing is skipped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.dev import images
from helm_operator.dev.devcluster import ClusterError, DevCluster
from helm_operator.dev.realnode import RealNode
from helm_operator.dev.tools import Toolchain

from . import diagnosis, pace
from .operator import REPO, CallFailed, OperatorProcess, Resources, Wait, eventually, shipped_watches


def pytest_configure(config: pytest.Config) -> None:
    """Measure this process's slowdown once, before any wait is computed (tests/e2e/pace.py)."""
    factor, seconds = pace.measure()
    pace.set_factor(factor)
    config.stash[PACE] = (factor, seconds)


def pytest_report_header(config: pytest.Config) -> str:
    factor, seconds = config.stash[PACE]
    return (
        f"e2e slowdown factor {factor:.2f} (probe {seconds * 1000:.1f} ms against "
        f"{pace.reference() * 1000:.1f} ms quiet; load {' '.join(f'{x:.2f}' for x in os.getloadavg())})"
    )


PACE = pytest.StashKey[tuple[float, float]]()
STARTED = pytest.StashKey[tuple[float, dict[int, int]]]()


class Session:
    """What a failed test's diagnosis reads: the session's cluster, helm and shared operator."""

    cluster: DevCluster | None = None
    helm: Path | None = None
    operator: OperatorProcess | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Each operator made so far, with its starts: those running when the test fails served it from
    # the start after these on (a module's or the session's), those made since are all the test's.
    item.stash[STARTED] = (time.time(), {id(op): op.starts for op in OperatorProcess.seen})
    Wait.what = ""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    """A failed test (setup or body) gets a diagnosis in its report and artifacts on disk."""
    report = yield
    if report.failed and report.when in ("setup", "call") and STARTED in item.stash:
        since, before = item.stash[STARTED]
        made = [(op, 1) for op in OperatorProcess.seen if id(op) not in before]
        running = [
            (op, max(1, before[id(op)])) for op in OperatorProcess.seen if id(op) in before and op.proc
        ]
        operators = made + running  # the test's own first: the closing block shows their tails first
        try:
            failure = call.excinfo.value if call.excinfo is not None else None
            text = diagnosis.gather(item.nodeid, Session.cluster, Session.helm, since, operators, failure)
        except Exception as exc:  # the diagnosis must never hide the failure it explains
            text = f"(diagnosis failed: {type(exc).__name__}: {exc})"
        report.sections.append(("diagnosis", text))
    return report


def _sigterm_as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt("SIGTERM")


@pytest.fixture(scope="session")
def tools() -> Toolchain:
    return Toolchain.discover()


@pytest.fixture(scope="session")
def cluster(tools: Toolchain, request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    reuse = os.environ.get("HELM_OPERATOR_KUBECONFIG")
    if reuse:
        Session.cluster, Session.helm = DevCluster.attach(reuse, tools=tools), tools.helm
        yield Session.cluster
        return
    # pytest runs fixture teardown on KeyboardInterrupt; make SIGTERM (CI cancelling) do the same.
    previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    # Under pytest-xdist each process starts a control plane of its own; control planes start one
    # at a time on the machine (DevCluster holds a machine-wide lock until its cluster is Ready).
    cluster = DevCluster(tools=tools, nodes=4)
    try:
        try:
            cluster.start()
        except ClusterError as exc:
            # Missed its deadline on a loaded machine (every test of this process would error):
            # a fresh one, once; the same error again is the session's.
            print(f"\nthe local control plane did not start ({exc}); starting a fresh one", file=sys.stderr)
            cluster.stop()
            cluster = DevCluster(tools=tools, nodes=4)
            cluster.start()
        Session.cluster, Session.helm = cluster, tools.helm
        yield cluster
    finally:
        if request.session.testsfailed:  # its components' logs outlive it when a test failed
            diagnosis.keep_cluster_logs(cluster)
        cluster.stop()
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="session")
def real_node(cluster: DevCluster, request: pytest.FixtureRequest) -> Iterator[RealNode]:
    """One real kubelet node (containerd) joins the session's cluster when a test first needs real
    processes, with every image imported; on teardown nothing of it may stay on the machine (its
    components' logs are kept when a test failed)."""
    if cluster.real_node is not None:
        yield cluster.real_node
        return
    node = RealNode(cluster.root, cluster.kubeconfig, cluster.tools)
    # One real node per machine: a concurrent run's is waited for (it releases it when it ends).
    node.start(lambda: images.archives().values(), lock_wait=1200)
    try:
        yield node
    finally:
        if request.session.testsfailed:
            diagnosis.keep_node_logs(node)
        left = node.stop()
        assert left == [], f"the real node left traces on the machine: {left}"


class Helm:
    """The real helm binary, isolated from the user's helm config and cache."""

    def __init__(self, binary: Path, cluster: DevCluster, home: Path) -> None:
        self.binary = binary
        self.env = {
            **cluster.env,
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.binary), *args], env=self.env, text=True, capture_output=True, timeout=300
        )
        if check and proc.returncode != 0:
            raise CallFailed(f"helm {' '.join(args)} failed: {proc.stderr}")
        return proc

    @property
    def major(self) -> int:
        out = self("version", "--short").stdout.strip()
        return int(out.lstrip("v").split(".")[0])


def releases(helm: Helm, ns: str) -> dict[str, dict[str, Any]]:
    """The releases of a namespace in any state but uninstalled, by name (`helm list`)."""
    flags = ("--deployed", "--failed", "--pending", "--uninstalling", "--superseded")
    out = helm("list", *flags, "-n", ns, "-o", "json").stdout
    return {r["name"]: r for r in json.loads(out)}


def custom(api_version: str, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A custom resource as users write it."""
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec}


def crd(group: str, kind: str, plural: str, status: bool = False) -> dict[str, Any]:
    """A minimal CustomResourceDefinition of one served version ``v1`` with an open schema
    (``status``: with the status subresource)."""
    version: dict[str, Any] = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    }
    if status:
        version["subresources"] = {"status": {}}
    names = {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "names": names, "scope": "Namespaced", "versions": [version]},
    }


def ready_wait_times_out(res: Any, resource: str, name: str) -> None:
    """``kubectl wait --for=condition=Ready`` keeps waiting for a held change (it compares the
    condition's observedGeneration with the generation)."""
    waited = res.cluster.kubectl(
        "wait", "--for=condition=Ready", f"{resource}/{name}", "-n", res.ns, "--timeout=3s", check=False
    )
    assert waited.returncode != 0 and "timed out" in waited.stderr, (waited.stdout, waited.stderr)


def tiny(name: str, **spec: Any) -> dict[str, Any]:
    """A resource of the test kind Tiny (tests/e2e/charts/tiny)."""
    return custom("test.helm-operator.io/v1", "Tiny", name, spec)


@pytest.fixture(params=["helm", "helm3"], ids=["helm4", "helm3"])
def helm(
    request: pytest.FixtureRequest,
    tools: Toolchain,
    cluster: DevCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Helm:
    binary = getattr(tools, request.param)
    tools.require(request.param)
    return Helm(binary, cluster, tmp_path_factory.mktemp(request.param))


@pytest.fixture
def helm4(tools: Toolchain, cluster: DevCluster, tmp_path: Path) -> Helm:
    """A helm v4 client (isolated home) for tests that read releases by hand."""
    return Helm(tools.helm, cluster, tmp_path)


def _fresh_namespace(cluster: DevCluster, request: pytest.FixtureRequest, prefix: str) -> Iterator[str]:
    base = request.node.name.lower().replace("_", "-").replace("[", "-").replace("]", "")
    name = f"{prefix}-{base}"[:50].rstrip("-") + f"-{os.urandom(2).hex()}"
    cluster.kubectl("create", "namespace", name)
    yield name
    if prefix == "t":
        drain(cluster, name, Session.operator)
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def drain(cluster: DevCluster, ns: str, op: OperatorProcess | None, timeout: float = 120) -> None:
    """Delete the custom resources of a namespace ``op`` serves and wait until they are gone
    (uninstalled, finalizers done): the next test starts without this one's uninstalls (final
    backups included) running beside it. Resources still there at the deadline are named (the
    namespace is deleted all the same). Nothing to wait for when ``op`` is not running."""
    if op is None or op.proc is None:
        return
    # Namespaced kinds only: `-n` means nothing to a cluster-scoped one, and `--all` would take every
    # object of it in the cluster.
    names = '{.items[?(@.spec.scope=="Namespaced")].metadata.name}'
    listed = cluster.kubectl("get", "crd", "-o", f"jsonpath={names}", check=False)
    kinds = ",".join(listed.stdout.split())
    if listed.returncode != 0 or not kinds:
        return
    cluster.kubectl(
        "delete", kinds, "--all", "-n", ns, "--wait=false", "--ignore-not-found", check=False, timeout=120
    )

    left: list[str] = []

    def gone() -> bool:
        left[:] = cluster.kubectl("get", kinds, "-n", ns, "-o", "name", check=True, timeout=60).stdout.split()
        return not left

    try:
        eventually(gone, timeout, f"the custom resources of {ns} deleted")
    except AssertionError as exc:
        print(f"\nteardown: {exc}; still there: {left}", file=sys.stderr)


@pytest.fixture
def namespace(cluster: DevCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test (``t-…``, served by the session operator), deleted afterwards."""
    yield from _fresh_namespace(cluster, request, "t")


@pytest.fixture
def solo_namespace(cluster: DevCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace no shared operator watches (``s-…``): for tests that run their own."""
    yield from _fresh_namespace(cluster, request, "s")


TINY_WATCH = {
    "group": "test.helm-operator.io",
    "version": "v1",
    "kind": "Tiny",
    "chart": str(REPO / "tests/e2e/charts/tiny"),
    "historyMax": 3,
    "timeout": "60s",
    "reconcilePeriod": "15s",
    "overrideValues": {"image": "registry.example/tiny:${TINY_TAG}"},  # OperatorProcess sets TINY_TAG
    "driftTrustedManagers": ["trusted-scaler"],
}


# The tiny chart with hooks that raise or hang on request.
HOOKED_WATCH = {
    "group": "test.helm-operator.io",
    "version": "v1",
    "kind": "Hooked",
    "chart": str(REPO / "tests/e2e/charts/tiny"),
    "timeout": "60s",
    "overrideValues": {"image": "registry.example/tiny:${TINY_TAG}"},
    "hooks": str(REPO / "tests/e2e/hooks/faulty.py"),
}


# The real-world chart under a kind whose plural is its own singular (KubeStateMetrics →
# kubestatemetrics), allowed its cluster-scoped RBAC; and under a tenant kind that is not.
REALWORLD_WATCHES = [
    {
        "group": "monitoring.test.helm-operator.io",
        "version": "v1",
        "kind": "KubeStateMetrics",
        "chart": str(REPO / "tests/e2e/charts/realworld"),
        "reconcilePeriod": "4s",
        "timeout": "90s",
        "allowClusterScoped": True,
    },
    {
        "group": "test.helm-operator.io",
        "version": "v1",
        "kind": "TenantApp",
        "chart": str(REPO / "tests/e2e/charts/realworld"),
        "timeout": "60s",
        "wait": False,  # Ready then follows the workloads as they come up
        "allowedNamespaces": ["shared-*"],
    },
]


@pytest.fixture(scope="session")
def crds(cluster: DevCluster) -> None:
    """The sample CRDs, the test CRDs and the operator's own (Rollout), established."""
    for folder in (REPO / "crds", REPO / "tests/e2e/crds", REPO / "config/02-crd-rollouts.yaml"):
        cluster.kubectl("apply", "-f", str(folder))
    cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")


@pytest.fixture(scope="session")
def e2e_watches(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped watches.yaml (absolute chart and hook paths) plus the test kinds."""
    path = tmp_path_factory.mktemp("watches") / "watches.yaml"
    path.write_text(yaml.safe_dump([*shipped_watches(), TINY_WATCH, HOOKED_WATCH, *REALWORLD_WATCHES]))
    return path


@pytest.fixture(scope="session")
def operator(
    cluster: DevCluster,
    crds: None,
    tools: Toolchain,
    e2e_watches: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """One operator (helm v4) for the session, watching the test namespaces (``t-*``)."""
    tools.require("helm")
    op = OperatorProcess(cluster, tools.helm, tmp_path_factory.mktemp("operator"), e2e_watches, ["t-*"])
    op.start()
    Session.operator = op
    # Serving, not only started: one resource end to end before the first test counts seconds.
    warmup = f"t-warmup-{os.urandom(2).hex()}"
    cluster.kubectl("create", "namespace", warmup)
    res = Resources(cluster, warmup)
    res.apply(tiny("warmup"))
    res.wait_condition("tinies.test.helm-operator.io", "warmup", "Ready", timeout=180)
    res.delete("tinies.test.helm-operator.io", "warmup")
    cluster.kubectl("delete", "namespace", warmup, "--wait=false", check=False)
    yield op
    op.stop()


@pytest.fixture
def res(cluster: DevCluster, namespace: str) -> Resources:
    return Resources(cluster, namespace)


@pytest.fixture(params=["helm4", "helm3"])
def driven(
    request: pytest.FixtureRequest,
    cluster: DevCluster,
    crds: None,
    tools: Toolchain,
    e2e_watches: Path,
    tmp_path: Path,
) -> Iterator[tuple[OperatorProcess, Resources, Helm]]:
    """A fresh namespace served by the session operator (helm v4), or by a dedicated operator that
    drives helm v3; with a helm client of the same major."""
    if request.param == "helm4":
        op = request.getfixturevalue("operator")
        ns = f"t-driven-{os.urandom(3).hex()}"
        cluster.kubectl("create", "namespace", ns)
        yield op, Resources(cluster, ns), Helm(tools.helm, cluster, tmp_path / "client")
    else:
        tools.require("helm3")
        ns = f"r3-{os.urandom(3).hex()}"
        cluster.kubectl("create", "namespace", ns)
        (tmp_path / "op").mkdir()
        op = OperatorProcess(cluster, tools.helm3, tmp_path / "op", e2e_watches, [ns])
        op.start()
        try:
            yield op, Resources(cluster, ns), Helm(tools.helm3, cluster, tmp_path / "client")
        finally:
            op.stop()
    if request.param == "helm4":
        drain(cluster, ns, Session.operator)
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
