"""What the real node's processes are told: pure renderings of their configuration files.

The real node is one kubelet with containerd beside KWOK's fake nodes, so the backups, restores and
failovers of the stateful samples (and the operator's own image) run as real processes. Everything it
writes lives under one folder of its cluster; the host only gains a bridge, an iptables chain and the
sysctls routing needs, which teardown removes (see :mod:`helm_operator.dev.realnode`).

Kept free of I/O so the settings this machine needs (and why) are checked by unit tests.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

# Only what a test or the demo places there runs on the real node: it carries this taint.
TAINT_KEY = "helm-operator.dev/real-node"
# And this label, to select it (nodeSelector) once tolerated.
LABEL = "helm-operator.dev/real-node"
NODE_NAME = "real"
CLUSTER_DOMAIN = "cluster.local"
PAUSE_IMAGE = "localhost/helm-operator/pause:3.10"
# Subnets for the pod bridge: 10.244.<index>.0/24; one real node per machine at a time (kube-proxy
# owns the host's Service rules), the index only keeps a stale bridge of a killed run out of the way.
POD_NETWORK = ipaddress.ip_network("10.244.0.0/16")


@dataclass(frozen=True)
class NodeNetwork:
    """The pod network of one real node: a Linux bridge, its subnet, and the iptables chain that keeps
    pod traffic on this machine."""

    index: int

    @property
    def bridge(self) -> str:
        return f"hobr{self.index}"

    @property
    def chain(self) -> str:
        return f"HO-NODE-{self.index}"

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"{POD_NETWORK.network_address + 256 * self.index}/24")

    @property
    def gateway(self) -> str:
        """The bridge's own address: the Pods' default route, the kubelet's node IP and cluster DNS."""
        return str(self.subnet.network_address + 1)

    @property
    def cni_name(self) -> str:
        return f"helm-operator-{self.index}"

    def isolation_rules(self) -> list[list[str]]:
        """Rules of :attr:`chain` (jumped to first from FORWARD): Pods reach each other, Services (DNAT'd
        back onto the bridge) and the host itself (INPUT, not forwarded), never another interface; and
        nothing from elsewhere is forwarded to them."""
        return [
            ["-i", self.bridge, "-o", self.bridge, "-j", "RETURN"],
            ["-i", self.bridge, "-j", "DROP"],
            ["-o", self.bridge, "-j", "DROP"],
        ]


@dataclass(frozen=True)
class NodePaths:
    """Every file the real node writes, under one folder (removed on teardown)."""

    root: Path

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd-state"

    @property
    def socket(self) -> Path:
        return self.root / "containerd.sock"

    @property
    def runc_root(self) -> Path:
        return self.root / "runc"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni"

    @property
    def cni_data(self) -> Path:
        return self.root / "cni-ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def resolv_conf(self) -> Path:
        return self.root / "resolv.conf"

    @property
    def kube_proxy_config(self) -> Path:
        return self.root / "kube-proxy.yaml"

    @property
    def corefile(self) -> Path:
        return self.root / "Corefile"

    @property
    def logs(self) -> Path:
        return self.root / "logs"


def containerd_config(paths: NodePaths, cni_bin_dir: str, sandbox_image: str = PAUSE_IMAGE) -> str:
    """containerd 1.6's configuration, private to this node (root, state, socket, runc root, CNI).

    ``restrict_oom_score_adj``: this machine drops CAP_SYS_RESOURCE from the bounding set, and runc then
    fails every sandbox ("can't get final child's PID from pipe") when asked to lower a score.
    ``sandbox_image``: the default (registry.k8s.io/pause) cannot be pulled here; ours is imported.
    """
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return "\n".join(
        [
            "version = 2",
            f"root = {json.dumps(str(paths.containerd_root))}",
            f"state = {json.dumps(str(paths.containerd_state))}",
            # The "opt" plugin would install into /opt/containerd: nothing of ours outside the folder.
            'disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.grpc.v1.cri.v1alpha2"]',
            "[grpc]",
            f"  address = {json.dumps(str(paths.socket))}",
            "[ttrpc]",
            '  address = ""',
            "[debug]",
            '  address = ""',
            f"[{cri}]",
            f"  sandbox_image = {json.dumps(sandbox_image)}",
            "  restrict_oom_score_adj = true",
            "  enable_selinux = false",
            f"[{cri}.cni]",
            f"  bin_dir = {json.dumps(cni_bin_dir)}",
            f"  conf_dir = {json.dumps(str(paths.cni_conf_dir))}",
            "  max_conf_num = 1",
            f"[{cri}.containerd]",
            '  snapshotter = "overlayfs"',
            '  default_runtime_name = "runc"',
            f"[{cri}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{cri}.containerd.runtimes.runc.options]",
            f"  Root = {json.dumps(str(paths.runc_root))}",
            "  SystemdCgroup = false",
            "",
        ]
    )


def cni_conflist(net: NodeNetwork, paths: NodePaths) -> dict[str, object]:
    """A bridge without masquerading (pod traffic never leaves this machine) and host-local addresses
    kept in the node's folder; hairpin so a Pod reaches itself through its own Service."""
    return {
        "cniVersion": "1.0.0",
        "name": net.cni_name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": net.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(paths.cni_data),
                    "ranges": [[{"subnet": str(net.subnet), "gateway": net.gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": False},
        ],
    }


def kubelet_config(
    net: NodeNetwork, paths: NodePaths, *, port: int, healthz_port: int, cgroup_root: str
) -> str:
    """The kubelet on this machine: cgroup v1 with the cgroupfs driver, swap tolerated, anonymous
    AlwaysAllow (a private test cluster), cluster DNS on the bridge, images never collected (there is
    no registry to pull them back from), and the taint that keeps charts' Pods on KWOK's nodes."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{paths.socket}",
        "podLogsDir": str(paths.pod_logs),
        "address": net.gateway,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDNS": [net.gateway],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(paths.resolv_conf),
        "volumePluginDir": str(paths.root / "volume-plugins"),
        "registerWithTaints": [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "maxPods": 60,
        "serializeImagePulls": False,
        "makeIPTablesUtilChains": True,
        "localStorageCapacityIsolation": False,
    }
    return yaml.safe_dump(config, sort_keys=False)


def kube_proxy_config(net: NodeNetwork, kubeconfig: Path, *, metrics_port: int, healthz_port: int) -> str:
    """kube-proxy in iptables mode, so ClusterIP Services (the ``kubernetes`` one too) answer from Pods.
    Conntrack limits and timeouts stay as the host has them (zero means: do not touch)."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "clusterCIDR": str(net.subnet),
        "hostnameOverride": NODE_NAME,
        "bindAddress": net.gateway,
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "nodePortAddresses": [str(net.subnet)],
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }
    return yaml.safe_dump(config, sort_keys=False)


def corefile(net: NodeNetwork, kubeconfig: Path) -> str:
    """Cluster DNS on the bridge address: Service and Pod names only. No ``forward``: a name outside the
    cluster is not resolved, so no query leaves this machine."""
    return (
        f".:53 {{\n"
        f"    bind {net.gateway}\n"
        f"    errors\n"
        f"    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n"
        f"        kubeconfig {kubeconfig}\n"
        f"        pods insecure\n"
        f"    }}\n"
        f"    cache 5\n"
        f"}}\n"
    )
