"""The real node's configuration: the settings this machine needs, and pod traffic kept on it."""

from __future__ import annotations

import ipaddress
import json
import tomllib
from pathlib import Path

import yaml

from helm_operator.dev import nodeconfig
from helm_operator.dev.devcluster import SERVICE_RANGE, kwokctl_config, provisioned
from helm_operator.dev.nodeconfig import NodeNetwork, NodePaths

PATHS = NodePaths(Path("/c/ho-1/node"))


def test_each_index_has_its_own_subnet_bridge_and_chain_inside_the_pod_network() -> None:
    a, b = NodeNetwork(0), NodeNetwork(3)
    assert (str(a.subnet), a.gateway, a.bridge, a.chain) == (
        "10.244.0.0/24",
        "10.244.0.1",
        "hobr0",
        "HO-NODE-0",
    )
    assert str(b.subnet) == "10.244.3.0/24" and b.gateway == "10.244.3.1"
    assert b.subnet.subnet_of(nodeconfig.POD_NETWORK)  # type: ignore[arg-type]
    assert len(b.bridge) <= 15  # a Linux interface name


def test_forwarding_off_the_bridge_is_dropped_and_nothing_is_forwarded_onto_it() -> None:
    rules = NodeNetwork(1).isolation_rules()
    # Pod to pod (and to a Service DNAT'd back onto the bridge) returns to the normal chains first...
    assert rules[0] == ["-i", "hobr1", "-o", "hobr1", "-j", "RETURN"]
    # ...everything else forwarded from or to the bridge is dropped.
    assert ["-i", "hobr1", "-j", "DROP"] in rules and ["-o", "hobr1", "-j", "DROP"] in rules
    assert not any("ACCEPT" in r for r in rules)


def test_containerd_is_private_and_works_without_cap_sys_resource_or_a_registry() -> None:
    config = tomllib.loads(nodeconfig.containerd_config(PATHS, "/usr/lib/cni"))
    assert config["root"].startswith("/c/ho-1/node/") and config["state"].startswith("/c/ho-1/node/")
    assert config["grpc"]["address"] == "/c/ho-1/node/containerd.sock"
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == nodeconfig.PAUSE_IMAGE and cri["sandbox_image"].startswith("localhost/")
    assert cri["cni"]["conf_dir"].startswith("/c/ho-1/node/")
    assert cri["containerd"]["runtimes"]["runc"]["options"]["Root"].startswith("/c/ho-1/node/")
    assert "io.containerd.internal.v1.opt" in config["disabled_plugins"]


def test_the_bridge_never_masquerades_and_keeps_its_addresses_in_the_node_folder() -> None:
    net = NodeNetwork(2)
    conf = nodeconfig.cni_conflist(net, PATHS)
    bridge = conf["plugins"][0]  # type: ignore[index]
    assert bridge["ipMasq"] is False and bridge["bridge"] == "hobr2"
    assert bridge["ipam"]["dataDir"].startswith("/c/ho-1/node/")
    assert ipaddress.ip_network(bridge["ipam"]["ranges"][0][0]["subnet"]) == net.subnet


def test_the_kubelet_runs_on_cgroup_v1_keeps_its_images_and_is_tainted() -> None:
    net = NodeNetwork(0)
    config = yaml.safe_load(
        nodeconfig.kubelet_config(
            net, PATHS, port=40000, healthz_port=40001, cgroup_root="/helm-operator/ho-1"
        )
    )
    assert config["failCgroupV1"] is False and config["cgroupDriver"] == "cgroupfs"
    assert config["failSwapOn"] is False
    assert config["containerRuntimeEndpoint"] == "unix:///c/ho-1/node/containerd.sock"
    assert config["podLogsDir"].startswith("/c/ho-1/node/")
    assert config["clusterDNS"] == [net.gateway] and config["address"] == net.gateway
    # No registry to pull an image back from: the kubelet must never collect one.
    assert config["imageGCHighThresholdPercent"] == 100
    assert config["registerWithTaints"] == [
        {"key": nodeconfig.TAINT_KEY, "value": "true", "effect": "NoSchedule"}
    ]
    assert config["cgroupRoot"] == "/helm-operator/ho-1"


def test_cluster_dns_answers_only_cluster_names() -> None:
    corefile = nodeconfig.corefile(NodeNetwork(0), Path("/c/ho-1/kubeconfig"))
    assert "bind 10.244.0.1" in corefile and "kubernetes cluster.local" in corefile
    assert "forward" not in corefile  # no query leaves this machine


def test_kube_proxy_leaves_the_hosts_conntrack_settings_alone() -> None:
    config = yaml.safe_load(
        nodeconfig.kube_proxy_config(NodeNetwork(0), Path("/k"), metrics_port=1, healthz_port=2)
    )
    assert config["mode"] == "iptables" and config["hostnameOverride"] == nodeconfig.NODE_NAME
    assert config["conntrack"]["maxPerCore"] == 0 and config["conntrack"]["min"] == 0


def test_the_api_servers_certificate_names_the_kubernetes_services_ip() -> None:
    """In-cluster clients reach the API server at the range's first address and check its name."""
    config = json.loads(kwokctl_config())
    assert config["kind"] == "KwokctlConfiguration"
    assert SERVICE_RANGE == "10.96.0.0/16" and config["options"]["kubeApiserverCertSANs"] == ["10.96.0.1"]


def test_only_the_provisioners_folders_are_removed_with_the_cluster() -> None:
    volumes = [
        {"spec": {"hostPath": {"path": "/tmp/hostpath_pv/8c1e"}}},
        {"spec": {"hostPath": {"path": "/srv/data"}}},  # made by hand: not ours to remove
        {"spec": {"hostPath": {"path": "/tmp/hostpath_pv"}}},
        {"spec": {"local": {"path": "/tmp/hostpath_pv/x"}}},
        {"spec": {"hostPath": {"path": "/tmp/hostpath_pv/../etc"}}},
        {},
    ]
    assert provisioned(volumes) == [Path("/tmp/hostpath_pv/8c1e")]
