"""One real node beside KWOK's fake ones: containerd, runc, a CNI bridge, kubelet, kube-proxy, CoreDNS.

KWOK's nodes keep serving everything else (fast, no containers); on this node the stateful samples'
backups, restores and failovers and the operator's own image run as real processes. It is tainted, so
only what a test or the demo places there (with the toleration) runs there.

Nothing is left behind on this machine: everything is written under ``<cluster>/node``; the host only
gains a bridge, one iptables chain (pod traffic never leaves this machine: forwarding off the bridge
is dropped), the kubelet's and kube-proxy's chains, the sysctls routing needs and a cgroup subtree,
and ``stop()`` removes them all (also after a killed run: the next ``start()`` reaps it).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

from helm_operator.dev import nodeconfig
from helm_operator.dev.nodeconfig import NodeNetwork, NodePaths
from helm_operator.dev.procs import kill, pids_referencing
from helm_operator.dev.tools import Toolchain

log = logging.getLogger(__name__)

CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
CGROUP_BASE = "/sys/fs/cgroup"
NETNS_DIR = Path("/var/run/netns")
CONTAINER_LOG_LINKS = Path("/var/log/containers")  # the kubelet links every container log here
# Chains the kubelet creates and never removes (kube-proxy --cleanup removes its own).
KUBELET_CHAINS = {
    "filter": ["KUBE-FIREWALL", "KUBE-KUBELET-CANARY"],
    "nat": ["KUBE-KUBELET-CANARY"],
    "mangle": ["KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"],
}
# What routing Pods through Services needs; each is put back as it was.
SYSCTLS = (
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
)
STATE_FILE = "node.json"


class NodeError(RuntimeError):
    """The real node could not start; the message names what is missing or what failed."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(*cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), text=True, capture_output=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise NodeError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name


def sysctl(name: str) -> str:
    """The current value of a kernel setting (``net/ipv4/ip_forward``)."""
    return _sysctl_path(name).read_text().strip()


def _pids_in_cgroups(root: str) -> list[int]:
    pids: set[int] = set()
    base = Path(CGROUP_BASE) / "pids" / root.lstrip("/")
    if base.is_dir():
        for procs in base.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in procs.read_text().split())
    return sorted(pids)


def _mounts_under(prefix: Path) -> list[str]:
    """Mount points under ``prefix``, deepest first (so each unmounts before its parent)."""
    points = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point == str(prefix) or point.startswith(str(prefix) + "/"):
                points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


class RealNode:
    """A kubelet node backed by containerd, joined to one local cluster. ``start()``/``stop()``."""

    def __init__(self, cluster_root: Path, kubeconfig: Path, tools: Toolchain) -> None:
        self.paths = NodePaths(cluster_root / "node")
        self.kubeconfig = kubeconfig
        self.tools = tools
        self.net = NodeNetwork(0)
        self.cgroup_root = f"/helm-operator/{cluster_root.name}"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock: IO[str] | None = None
        self._holder = ""
        self._sysctls_before: dict[str, str] = {}  # as this node found them (once it was the machine's)

    # -- prerequisites ---------------------------------------------------------------------
    def require(self) -> None:
        """Everything the node needs, each missing one named with how to get it."""
        if os.geteuid() != 0:
            raise NodeError("the real node needs root (containerd, mounts, iptables, a bridge)")
        self.tools.require("kubelet", "kube_proxy", "coredns")
        missing = [
            name
            for name in ("containerd", "runc", "ctr", "iptables", "ip6tables", "ip", "conntrack", "mount")
            if shutil.which(name) is None
        ]
        if not (Path(CNI_BIN_DIR) / "bridge").is_file():
            missing.append(f"{CNI_BIN_DIR}/bridge (containernetworking-plugins)")
        for hierarchy in ("pids", "memory", "cpu"):
            if not (Path(CGROUP_BASE) / hierarchy).is_dir():
                missing.append(f"cgroup v1 hierarchy {CGROUP_BASE}/{hierarchy}")
        if not _sysctl_path(SYSCTLS[2]).exists():
            missing.append("bridge netfilter (/proc/sys/net/bridge: the br_netfilter module)")
        if missing:
            raise NodeError(
                "the real node is missing: "
                + ", ".join(missing)
                + "; `tools/bootstrap node-packages` installs "
                "the Debian packages"
            )

    # -- lifecycle -------------------------------------------------------------------------
    def start(
        self, images: Callable[[], Iterable[Path]], timeout: float = 300.0, lock_wait: float = 0.0
    ) -> None:
        """Join the cluster with the image archives ``images()`` returns (asked once this machine's
        node is ours: a rebuild meanwhile replaces them); with ``lock_wait``, first wait that long
        for another cluster's real node to stop (one per machine) instead of failing at once."""
        self.require()
        self._take_machine_lock(lock_wait)
        self.paths.root.mkdir(parents=True, exist_ok=True)
        self.paths.logs.mkdir(exist_ok=True)
        self._sysctls_before = {s: sysctl(s) for s in SYSCTLS}
        state = {
            "sysctls": self._sysctls_before,
            "netns_dir_existed": NETNS_DIR.is_dir(),
            "netns_before": sorted(p.name for p in NETNS_DIR.iterdir()) if NETNS_DIR.is_dir() else [],
        }
        (self.paths.root / STATE_FILE).write_text(json.dumps(state))
        try:
            # The timeout is the node's own start: a rebuild of an image whose inputs changed (the
            # operator's, after any code change: about two minutes here) must not use it up. Its
            # importing every image into containerd and the kubelet's registering may take minutes
            # beside two other control planes and their tests on 2 cores (120 s was once too few).
            archives = list(images())
            started = time.monotonic()
            self._network_up()
            self._containerd_up(archives)
            self._coredns_up()
            self._kubelet_up()
            self._kube_proxy_up()
            self._wait_ready(started + timeout)
        except BaseException:
            self.stop()
            raise
        log.info("real node ready in %.1fs (pods on %s)", time.monotonic() - started, self.net.subnet)

    def stop(self) -> list[str]:
        """Stop every process and remove every trace; safe to call twice and after a killed run.
        Returns what is left of it (:meth:`leftovers`, read before another node may start)."""
        root = self.paths.root
        state: dict[str, object] = {}
        with contextlib.suppress(OSError, ValueError):
            state = json.loads((root / STATE_FILE).read_text())
        # The kubelet first, so it does not restart what is being stopped; then every container
        # process (they live in the node's cgroups), then containerd and its shims.
        for name in ("kubelet", "kube-proxy", "coredns"):
            self._stop_proc(name)
        kill(pids_referencing(str(self.paths.kubelet_config)))  # a killed run's kubelet
        self._kill_containers()
        self._stop_proc("containerd")
        kill(pids_referencing(str(root)))
        self._kill_containers()
        for point in _mounts_under(root):
            _run("umount", "-l", point, check=False)
        # The bridge, the Service rules and the sysctls are the machine's one real node's: a stale
        # node reaped while another cluster's real node runs leaves them to that one.
        if self._lock is not None or self._try_machine_lock():
            self._remove_host_traces(state)
        self._remove_cgroups()
        shutil.rmtree(root, ignore_errors=True)
        left = self.leftovers()
        self._release_machine_lock()
        return left

    def signal(self, container_id: str, sig: str = "SIGKILL") -> None:
        """Send ``sig`` from the host to a container's first process (``containerd://<id>`` as a
        Pod's status names it): a crash of what the container runs, as a test needs one."""
        task = container_id.rpartition("://")[2]
        _run(
            "ctr", "--address", str(self.paths.socket), "-n", "k8s.io", "tasks", "kill", "--signal", sig, task
        )

    def _kill_containers(self) -> None:
        for _ in range(50):
            pids = _pids_in_cgroups(self.cgroup_root)
            if not pids:
                return
            kill(pids)
            time.sleep(0.1)

    def _remove_host_traces(self, state: dict[str, object]) -> None:
        with contextlib.suppress(Exception):
            _run(str(self.tools.kube_proxy), "--cleanup", check=False, timeout=30)
        self._remove_iptables()
        before = state.get("netns_before")
        if NETNS_DIR.is_dir() and isinstance(before, list):
            for ns in NETNS_DIR.iterdir():
                if ns.name.startswith("cni-") and ns.name not in before:
                    _run("umount", "-l", str(ns), check=False)
                    with contextlib.suppress(OSError):
                        ns.unlink()
            if state.get("netns_dir_existed") is False:
                with contextlib.suppress(OSError):
                    NETNS_DIR.rmdir()  # containerd made it; gone once empty
        _run("ip", "link", "delete", self.net.bridge, check=False)
        for link in CONTAINER_LOG_LINKS.glob("*.log") if CONTAINER_LOG_LINKS.is_dir() else []:
            with contextlib.suppress(OSError):
                if str(self.paths.pod_logs) in os.readlink(link):
                    link.unlink()
        for cache in Path("/var/lib/cni/results").glob(f"{self.net.cni_name}-*"):
            with contextlib.suppress(OSError):
                cache.unlink()
        sysctls = state.get("sysctls", {})
        if isinstance(sysctls, dict):
            for name, value in sysctls.items():
                with contextlib.suppress(OSError):
                    _sysctl_path(name).write_text(str(value))

    def leftovers(self) -> list[str]:
        """What of this node is still on the machine (empty after ``stop()``): its processes, mounts,
        bridge, iptables chains, Pod network namespaces, cgroups and its folder."""
        found = [f"process {pid}" for pid in pids_referencing(str(self.paths.root))]
        found += [f"container process {pid}" for pid in _pids_in_cgroups(self.cgroup_root)]
        found += [f"mount {m}" for m in _mounts_under(self.paths.root)]
        if _run("ip", "link", "show", self.net.bridge, check=False).returncode == 0:
            found.append(f"bridge {self.net.bridge}")
        for binary in ("iptables", "ip6tables"):
            for table in ("filter", "nat", "mangle"):
                for line in _run(binary, "-t", table, "-S", check=False).stdout.splitlines():
                    parts = line.split()
                    if parts[:1] == ["-N"] and (parts[1].startswith(("KUBE-", "HO-NODE-"))):
                        found.append(f"{binary} {table} chain {parts[1]}")
        for hierarchy in ("pids", "memory", "cpu"):
            if (Path(CGROUP_BASE) / hierarchy / self.cgroup_root.lstrip("/")).exists():
                found.append(f"cgroup {hierarchy}{self.cgroup_root}")
        if self.paths.root.exists():
            found.append(f"folder {self.paths.root}")
        found += [
            f"sysctl {name} = {sysctl(name)} (was {value})"
            for name, value in self._sysctls_before.items()
            if sysctl(name) != value
        ]
        return found

    # -- pieces ----------------------------------------------------------------------------
    def _try_machine_lock(self) -> bool:
        """One real node per machine: kube-proxy and the kubelet own host-wide iptables chains."""
        path = self.paths.root.parent.parent.parent / "real-node.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            self._holder = handle.read().strip() or "another cluster"
            handle.close()
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(f"cluster {self.paths.root.parent.name}, pid {os.getpid()}\n")
        handle.flush()
        self._lock = handle
        return True

    def _take_machine_lock(self, wait: float) -> None:
        deadline = time.monotonic() + wait
        while not self._try_machine_lock() and time.monotonic() < deadline:
            time.sleep(1.0)
        if self._lock is None:
            raise NodeError(
                f"a real node already runs on this machine ({self._holder}); one at a time: kube-proxy "
                "owns the host's Service rules. Stop that cluster first."
            )

    def _release_machine_lock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _network_up(self) -> None:
        net = self.net
        _run("ip", "link", "delete", net.bridge, check=False)  # a killed run's leftover
        _run("ip", "link", "add", net.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{net.gateway}/{net.subnet.prefixlen}", "dev", net.bridge)
        _run("ip", "link", "set", net.bridge, "up")
        self._remove_iptables()
        _run("iptables", "-N", net.chain)
        for rule in net.isolation_rules():
            _run("iptables", "-A", net.chain, *rule)
        _run("iptables", "-I", "FORWARD", "1", "-j", net.chain)
        for name, value in (
            ("net/ipv4/ip_forward", "1"),
            ("net/bridge/bridge-nf-call-iptables", "1"),
            # The `kubernetes` Service's endpoint is the API server on loopback.
            ("net/ipv4/conf/all/route_localnet", "1"),
        ):
            _sysctl_path(name).write_text(value)
        self.paths.cni_conf_dir.mkdir(exist_ok=True)
        (self.paths.cni_conf_dir / "10-helm-operator.conflist").write_text(
            json.dumps(nodeconfig.cni_conflist(net, self.paths), indent=2)
        )
        self.paths.resolv_conf.write_text("")

    def _remove_iptables(self) -> None:
        chain = self.net.chain
        while _run("iptables", "-D", "FORWARD", "-j", chain, check=False).returncode == 0:
            pass
        _run("iptables", "-F", chain, check=False)
        _run("iptables", "-X", chain, check=False)
        for binary in ("iptables", "ip6tables"):
            for table, chains in KUBELET_CHAINS.items():
                for name in chains:
                    # Rules that jump to the chain first, then the chain itself.
                    listing = _run(binary, "-t", table, "-S", check=False).stdout.splitlines()
                    for rule in listing:
                        parts = rule.split()
                        if parts[:1] == ["-A"] and "-j" in parts and parts[parts.index("-j") + 1] == name:
                            _run(binary, "-t", table, "-D", *parts[1:], check=False)
                    _run(binary, "-t", table, "-F", name, check=False)
                    _run(binary, "-t", table, "-X", name, check=False)

    def _spawn(self, name: str, *cmd: str) -> None:
        out = (self.paths.logs / f"{name}.log").open("ab")
        self._procs[name] = subprocess.Popen(
            list(cmd), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        out.close()

    def _stop_proc(self, name: str, grace: float = 10.0) -> None:
        proc = self._procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def _check_alive(self, name: str) -> None:
        proc = self._procs.get(name)
        if proc is not None and proc.poll() is not None:
            tail = (self.paths.logs / f"{name}.log").read_text(errors="replace").splitlines()[-30:]
            raise NodeError(f"{name} exited ({proc.returncode}); last lines:\n" + "\n".join(tail))

    def _containerd_up(self, image_archives: Iterable[Path]) -> None:
        p = self.paths
        p.containerd_config.write_text(nodeconfig.containerd_config(p, CNI_BIN_DIR))
        self._spawn("containerd", "containerd", "--config", str(p.containerd_config))
        deadline = time.monotonic() + 30
        while not p.socket.exists():
            self._check_alive("containerd")
            if time.monotonic() > deadline:
                raise NodeError(f"containerd did not open {p.socket} in 30s (log: {p.logs}/containerd.log)")
            time.sleep(0.1)
        for archive in image_archives:
            _run(
                "ctr",
                "--address",
                str(p.socket),
                "-n",
                "k8s.io",
                "images",
                "import",
                str(archive),
                timeout=300,
            )

    def _coredns_up(self) -> None:
        self.paths.corefile.write_text(nodeconfig.corefile(self.net, self.kubeconfig))
        self._spawn("coredns", str(self.tools.coredns), "-conf", str(self.paths.corefile))

    def _kubelet_up(self) -> None:
        p = self.paths
        p.kubelet_config.write_text(
            nodeconfig.kubelet_config(
                self.net, p, port=_free_port(), healthz_port=_free_port(), cgroup_root=self.cgroup_root
            )
        )
        for hierarchy in Path(CGROUP_BASE).iterdir():
            if hierarchy.is_dir() and (hierarchy / "cgroup.procs").exists():
                (hierarchy / self.cgroup_root.lstrip("/")).mkdir(parents=True, exist_ok=True)
        self._spawn(
            "kubelet",
            str(self.tools.kubelet),
            "--config",
            str(p.kubelet_config),
            "--kubeconfig",
            str(self.kubeconfig),
            "--hostname-override",
            nodeconfig.NODE_NAME,
            "--node-ip",
            self.net.gateway,
            "--root-dir",
            str(p.kubelet_root),
            "--cert-dir",
            str(p.kubelet_root / "pki"),
            "--node-labels",
            f"{nodeconfig.LABEL}=true",
        )

    def _kube_proxy_up(self) -> None:
        p = self.paths
        p.kube_proxy_config.write_text(
            nodeconfig.kube_proxy_config(
                self.net, self.kubeconfig, metrics_port=_free_port(), healthz_port=_free_port()
            )
        )
        self._spawn("kube-proxy", str(self.tools.kube_proxy), "--config", str(p.kube_proxy_config))

    def _wait_ready(self, deadline: float) -> None:
        last = "no Node object yet"
        while time.monotonic() < deadline:
            for name in ("containerd", "coredns", "kubelet", "kube-proxy"):
                self._check_alive(name)
            proc = subprocess.run(
                [
                    str(self.tools.kubectl),
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "get",
                    "node",
                    nodeconfig.NODE_NAME,
                    "-o",
                    "json",
                ],
                text=True,
                capture_output=True,
            )
            if proc.returncode == 0:
                conditions = json.loads(proc.stdout).get("status", {}).get("conditions", [])
                ready = [c for c in conditions if c["type"] == "Ready"]
                if ready and ready[0]["status"] == "True":
                    return
                last = ready[0].get("message", "") if ready else "no Ready condition yet"
            time.sleep(0.5)
        raise NodeError(f"the real node did not become Ready: {last} (logs: {self.paths.logs})")

    def _remove_cgroups(self) -> None:
        for hierarchy in Path(CGROUP_BASE).iterdir():
            top = hierarchy / self.cgroup_root.lstrip("/")
            if not top.is_dir():
                continue
            for d in sorted(
                (d for d in top.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True
            ):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()
            with contextlib.suppress(OSError):
                top.parent.rmdir()  # /helm-operator, when no other cluster uses it
