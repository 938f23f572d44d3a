"""A real local Kubernetes control plane for tests and the demo.

kube-apiserver (RBAC + admission on), etcd, kube-controller-manager, kube-scheduler and a KWOK
controller that plays the kubelet for fake Nodes, all started by ``kwokctl --runtime binary``
from the binaries ``tools/bootstrap`` built. Each cluster gets its own name, random ports and
kubeconfig under ``~/.cache/helm-operator/clusters/<name>``.

Clusters start one at a time on a machine (a lock held from choosing ports until the cluster is
ready): kwokctl picks free ports when it creates a cluster and its processes bind them later, so
two clusters created seconds apart could pick the same ones.

Nothing is left behind: ``stop()`` deletes the cluster and kills any process still running from
its directory, and every ``start()`` first reaps clusters whose owning process has died (a test
run killed with SIGKILL cannot clean up after itself, the next one does).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from helm_operator.dev.kubeget import InProcessGet
from helm_operator.dev.procs import kill_all, pid_alive, pids_referencing
from helm_operator.dev.realnode import RealNode
from helm_operator.dev.tools import Toolchain

log = logging.getLogger(__name__)

OWNER_FILE = "owner.pid"
STAGING_PREFIX = "."  # a folder being made, named .<cluster>.<pid> until its owner is in it
SERVICE_RANGE = "10.96.0.0/16"  # room for every Service a benchmark at N = 1000 (and more) creates


HOSTPATH_PV = Path("/tmp/hostpath_pv")  # where the in-tree hostPath provisioner makes volumes


def provisioned(volumes: Iterable[dict[str, object]]) -> list[Path]:
    """The provisioner's folders among PersistentVolumes (only those: a hand-made hostPath PV
    may point anywhere)."""
    found = []
    for pv in volumes:
        spec = pv.get("spec")
        host = spec.get("hostPath") if isinstance(spec, dict) else None
        path = Path(str(host.get("path"))) if isinstance(host, dict) else None
        if path is not None and path.parent == HOSTPATH_PV and path.name not in ("", ".", ".."):
            found.append(path)
    return found


def kwokctl_config() -> str:
    """kwokctl's configuration: the API server's certificate also names the ``kubernetes``
    Service's IP (the range's first address), which in-cluster clients use by default (kwokctl
    names the Service's DNS names and this machine's addresses only)."""
    service_ip = str(ipaddress.ip_network(SERVICE_RANGE)[1])
    return json.dumps(
        {
            "kind": "KwokctlConfiguration",
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "options": {"kubeApiserverCertSANs": [service_ip]},
        }
    )


# Who lists and watches what, with which selectors (the request's URI), for everyone but the
# cluster's own components: how a test sees what reached the API server, not what a client did
# with it. A watch is recorded when it starts and when it ends.
AUDIT_POLICY = """
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  userGroups: [system:nodes]
- level: None
  users: [system:kube-controller-manager, system:kube-scheduler, system:apiserver, system:kube-proxy]
- level: Metadata
  verbs: [list, watch]
- level: None
"""

# The default StorageClass: dynamic hostPath volumes from kube-controller-manager, so charts with
# PersistentVolumeClaims (StatefulSets) bind and their Pods schedule as on a real cluster.
STORAGE_CLASS = """
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/host-path
reclaimPolicy: Delete
volumeBindingMode: Immediate
"""


class ClusterError(RuntimeError):
    """The local control plane could not be started; the message says why."""


START_LOCK = Path(tempfile.gettempdir()) / "helm-operator-cluster-start.lock"


@contextlib.contextmanager
def starting_alone(wait: float = 1800.0) -> Iterator[float]:
    """Hold the machine-wide cluster-start lock (every user of this machine shares it, whatever
    their clusters folder); yields the seconds spent waiting for another start to finish."""
    START_LOCK.touch(exist_ok=True)
    began = time.monotonic()
    with START_LOCK.open("r+") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - began > wait:
                    raise ClusterError(
                        f"another local cluster has been starting for over {wait:.0f}s ({START_LOCK})"
                    ) from None
                time.sleep(0.5)
        try:
            yield time.monotonic() - began
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def clusters_dir() -> Path:
    return Path(os.environ.get("HELM_OPERATOR_CLUSTERS", Path.home() / ".cache/helm-operator/clusters"))


class DevCluster:
    """One local cluster. Use as a context manager, or call ``start()`` / ``stop()``."""

    def __init__(
        self,
        name: str | None = None,
        *,
        nodes: int = 2,
        tools: Toolchain | None = None,
        real_node: bool = False,
        images: Callable[[], Iterable[Path]] | None = None,
    ) -> None:
        """``nodes`` fake (KWOK) nodes; ``real_node`` adds one kubelet with containerd, into which
        the archives ``images()`` returns are imported (there is no registry to pull from)."""
        self.name = name or f"ho-{os.getpid()}-{secrets.token_hex(2)}"
        self.nodes = nodes
        self.tools = tools or Toolchain.discover()
        self.root = clusters_dir() / self.name
        self.kubeconfig = self.root / "kubeconfig"
        self.owned = True
        self.real_node = RealNode(self.root, self.kubeconfig, self.tools) if real_node else None
        self._images = images
        self._reads: tuple[tuple[Path, int], InProcessGet] | None = None  # for the kubeconfig as it is

    @classmethod
    def attach(cls, kubeconfig: str | Path, tools: Toolchain | None = None) -> DevCluster:
        """Use a cluster someone else runs (e.g. ``helm-operator dev up``); ``stop()`` leaves it alone."""
        cluster = cls("attached", nodes=0, tools=tools)
        cluster.kubeconfig = Path(kubeconfig).resolve()
        if (cluster.kubeconfig.parent / "kwok").is_dir():  # one `dev up` started: its logs are beside
            cluster.root = cluster.kubeconfig.parent
        cluster.owned = False
        return cluster

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, timeout: float = 180.0) -> DevCluster:
        self.tools.require(
            "kube_apiserver",
            "kube_controller_manager",
            "kube_scheduler",
            "kubectl",
            "etcd",
            "kwok",
            "kwokctl",
        )
        if self.real_node is not None:
            self.real_node.require()
        reap_orphans()
        self._claim()
        try:
            with starting_alone() as waited:
                if waited > 1:
                    log.info("cluster %s waited %.1fs for another cluster's start", self.name, waited)
                self._create(timeout)
            if self.real_node is not None:
                self.real_node.start(self._images or list)
        except BaseException:
            self.stop()
            raise
        return self

    def _claim(self) -> None:
        """Make the cluster's folder with its owner already written in it. Every start reaps first,
        and the parts of a test run start at the same moment: a folder seen before its owner file
        was written looked orphaned, and another process's reaping removed it from under its start."""
        taken = ClusterError(f"cluster directory {self.root} already exists; is '{self.name}' running?")
        if self.root.exists():
            raise taken
        staging = self.root.with_name(f"{STAGING_PREFIX}{self.name}.{os.getpid()}")
        staging.mkdir(parents=True)
        (staging / OWNER_FILE).write_text(str(os.getpid()))
        try:
            staging.rename(self.root)  # atomic; refused if another start took the name meanwhile
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            raise taken from None

    def _create(self, timeout: float) -> None:
        """Create the control plane and its fake nodes, and wait until they are Ready."""
        started = time.monotonic()
        config = self.root / "kwokctl.yaml"
        config.write_text(kwokctl_config())
        audit = self.root / "audit-policy.yaml"
        audit.write_text(AUDIT_POLICY)
        self._kwokctl(
            "create",
            "cluster",
            "--config",
            str(config),
            "--kube-audit-policy",
            str(audit),
            "--runtime",
            "binary",
            "--kube-apiserver-binary",
            str(self.tools.kube_apiserver),
            "--kube-controller-manager-binary",
            str(self.tools.kube_controller_manager),
            "--kube-scheduler-binary",
            str(self.tools.kube_scheduler),
            "--kwok-controller-binary",
            str(self.tools.kwok),
            "--etcd-binary",
            str(self.tools.etcd),
            "--kube-authorization",
            "--kube-admission",
            # Each component's first --extra-args comes before any component's second: kwokctl
            # v0.8.0 panics otherwise.
            # PVCs bind through the in-tree hostPath provisioner (no storage exists otherwise).
            "--extra-args",
            "kube-controller-manager=enable-hostpath-provisioner=true",
            # The API server's default Service range (a /24) runs out at ~250 Services.
            "--extra-args",
            f"kube-apiserver=service-cluster-ip-range={SERVICE_RANGE}",
            # KWOK plays the kubelet only for its fake nodes (annotated by `kwokctl scale node`):
            # a real node's status and Pods are its kubelet's.
            "--extra-args",
            "kwok-controller=manage-all-nodes=false",
            # The API server reaches a real kubelet by address (node names do not resolve here).
            "--extra-args",
            "kube-apiserver=kubelet-preferred-address-types=InternalIP,Hostname",
            "--extra-args",
            "kwok-controller=manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            # The controllers' default client rate (20 requests/s) made rolling out a few
            # hundred Deployments take minutes of the cluster's time, not the operator's.
            "--extra-args",
            "kube-controller-manager=kube-api-qps=100",
            "--extra-args",
            "kube-controller-manager=kube-api-burst=200",
            "--kubeconfig",
            str(self.kubeconfig),
            "--quiet-pull",
            "--wait",
            f"{int(timeout)}s",
            timeout=timeout + 30,
        )
        if self.nodes:
            self._kwokctl("scale", "node", "--replicas", str(self.nodes), timeout=60)
        self._wait_ready(deadline=started + timeout)
        self.kubectl("apply", "-f", "-", input=STORAGE_CLASS)
        log.info(
            "cluster %s ready in %.1fs (kubeconfig %s)",
            self.name,
            time.monotonic() - started,
            self.kubeconfig,
        )

    def stop(self) -> None:
        """Delete the cluster; kill whatever survived; remove its directory. Safe to call twice."""
        if not self.owned or not self.root.exists():
            return
        if self.real_node is not None or (self.root / "node").exists():
            (self.real_node or RealNode(self.root, self.kubeconfig, self.tools)).stop()
        volumes = self._provisioned_dirs()
        with contextlib.suppress(Exception):
            self._kwokctl("delete", "cluster", timeout=60, check=False)
        kill_all(pids_referencing(self.root))
        for path in volumes:
            shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def _provisioned_dirs(self) -> list[Path]:
        """The folders the hostPath provisioner made for this cluster's volumes (it shares one
        parent with every other local cluster, and nothing deletes them once the cluster is gone)."""
        try:
            out = self.kubectl("get", "pv", "-o", "json", check=False, timeout=15).stdout
            items = (json.loads(out) if out else {}).get("items") or []
        except (subprocess.TimeoutExpired, ValueError, OSError):
            return []
        return provisioned(items)

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- helpers -----------------------------------------------------------------------------
    def audited(self) -> list[dict[str, object]]:
        """The API server's audit records so far: the list and watch requests of clients."""
        found = []
        for path in self.root.glob("kwok/clusters/*/logs/audit.log"):
            for line in path.read_text(errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    found.append(json.loads(line))
        return found

    @property
    def env(self) -> dict[str, str]:
        """Environment for tools pointed at this cluster (kubectl, helm)."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self, *args: str, check: bool = True, timeout: float = 60, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """kubectl against this cluster: a plain ``get … -o json`` is answered in this process
        (``kubeget``), the rest by a kubectl process."""
        if args[:1] == ("get",) and input is None:
            reads = self._in_process()
            answered = reads.answer(args, timeout, check) if reads is not None else None
            if answered is not None:
                return answered
        return subprocess.run(
            [str(self.tools.kubectl), *args],
            env=self.env,
            text=True,
            capture_output=True,
            check=check,
            timeout=timeout,
            input=input,
        )

    def _in_process(self) -> InProcessGet | None:
        """The in-process reader for the kubeconfig as it is now (a restart may rewrite it)."""
        try:
            stamp = (self.kubeconfig, self.kubeconfig.stat().st_mtime_ns)
        except OSError:
            return None
        if self._reads is None or self._reads[0] != stamp:
            self._reads = (stamp, InProcessGet(self.kubeconfig))
        return self._reads[1]

    def _kwokctl(self, *args: str, timeout: float, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "KWOK_WORKDIR": str(self.root / "kwok"),
            "KWOK_KUBE_VERSION": self.tools.kube_version,
            "KWOK_KUBECTL_BINARY": str(self.tools.kubectl),
        }
        cmd = [str(self.tools.kwokctl), "--name", self.name, *args]
        try:
            proc = subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raw = exc.stderr or b""
            said = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
            raise ClusterError(
                f"`kwokctl {' '.join(args[:2])}` did not finish in {timeout:.0f}s; it said:\n"
                f"{said.strip()[-4000:] or '(nothing)'}\ncomponent logs: {self.root / 'kwok'}"
            ) from None
        if check and proc.returncode != 0:
            raise ClusterError(
                f"`kwokctl {' '.join(args[:2])}` failed (exit {proc.returncode}):\n"
                f"{proc.stderr.strip()[-4000:]}"
            )
        return proc

    def _wait_ready(self, deadline: float) -> None:
        """The API answers /readyz and the fake Nodes report Ready."""
        last = ""
        while time.monotonic() < deadline:
            ready = self.kubectl("get", "--raw", "/readyz", check=False)
            if ready.returncode == 0 and ready.stdout.strip() == "ok":
                nodes = self.kubectl("get", "nodes", "-o", "json", check=False)
                if nodes.returncode == 0:
                    items = json.loads(nodes.stdout)["items"]
                    n_ready = sum(
                        1
                        for n in items
                        for c in n["status"].get("conditions", [])
                        if c["type"] == "Ready" and c["status"] == "True"
                    )
                    if n_ready >= self.nodes:
                        return
                    last = f"{n_ready}/{self.nodes} nodes Ready"
                else:
                    last = nodes.stderr.strip()
            else:
                last = (ready.stderr or ready.stdout).strip()
            time.sleep(0.5)
        raise ClusterError(f"cluster {self.name} not ready in time: {last}")


def reap_orphans() -> list[str]:
    """Stop clusters whose owning process is gone; return their names."""
    reaped: list[str] = []
    base = clusters_dir()
    if not base.is_dir():
        return reaped
    for root in base.iterdir():
        if not root.is_dir():
            continue
        if root.name.startswith(STAGING_PREFIX):  # a start's folder before it is named
            pid_text = root.name.rpartition(".")[2]
            if pid_text.isdigit() and not pid_alive(int(pid_text)):
                shutil.rmtree(root, ignore_errors=True)
            continue
        owner = root / OWNER_FILE
        try:
            pid = int(owner.read_text())
        except (OSError, ValueError):
            pid = 0
        if pid and pid_alive(pid):
            continue
        DevCluster(root.name, nodes=0).stop()
        reaped.append(root.name)
    return reaped


def wait_for_signal() -> None:
    """Block until Ctrl-C, SIGTERM or SIGHUP.

    SIGINT is handled explicitly: a shell starts a background command with SIGINT ignored, and
    Python keeps an inherited "ignore", so ``kill -INT`` would leave the cluster running.
    """

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
