"""The operator's own image runs as config/'s Deployment, on the real node, as a user deploys it.

``kubectl apply -f crds/`` and ``kubectl apply -f config/`` as committed, then the one patch a user
of this local cluster applies (docs/deploying.md, "The image"): the image's name (the one
``tools/bootstrap images`` builds from the Dockerfile and the real node has imported) and, for this
test, the Pods' placement on the real node (KWOK's fake nodes run no process). The in-cluster
configuration is the default one (the `kubernetes` Service's IP, which the local API server's
certificate names). Both replicas then run the image: Ready through their probes, as uid 65532 on
a read-only root filesystem, logged in with their ServiceAccount's token, one of them leading. A sample
resource in another namespace becomes Ready through them; deleting the leader's Pod hands the Lease
to the other replica, which reconciles the next change.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from helm_operator.dev import images
from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.nodeconfig import LABEL, NODE_NAME, TAINT_KEY
from helm_operator.dev.realnode import RealNode

from .operator import REPO, Resources, eventually
from .pace import within

# The real node may first wait (up to 20 minutes) for another run's to stop.
pytestmark = pytest.mark.timeout(1800)

CONFIG = REPO / "config"
MEMCACHED = "memcacheds.cache.example.com"
DEPLOYMENT = yaml.safe_load((CONFIG / "03-deployment.yaml").read_text())
NS = DEPLOYMENT["metadata"]["namespace"]
NAME = DEPLOYMENT["metadata"]["name"]
SELECTOR = ",".join(f"{k}={v}" for k, v in DEPLOYMENT["spec"]["selector"]["matchLabels"].items())
SERVICE_ACCOUNT = DEPLOYMENT["spec"]["template"]["spec"]["serviceAccountName"]
LEASE = "helm-operator"  # --leader-election-id's default; the Lease lives in the Pod's namespace

# What this local cluster asks of a user (a strategic merge patch: the container by name). The
# in-cluster configuration is the default one: the API server by the kubernetes Service's IP.
IMAGE = images.OPERATOR
PLACEMENT = {
    "nodeSelector": {LABEL: "true"},
    "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
}
PATCH = {"spec": {"template": {"spec": {"containers": [{"name": "operator", "image": IMAGE}], **PLACEMENT}}}}


def _json(cluster: DevCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def pods(cluster: DevCluster) -> list[dict[str, Any]]:
    """The operator's Pods that are not being deleted."""
    items = _json(cluster, "get", "pods", "-n", NS, "-l", SELECTOR)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    conds = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
    return pod["status"].get("phase") == "Running" and conds.get("Ready") == "True"


def both_ready(cluster: DevCluster) -> list[str] | None:
    """The names of the operator's two Pods once both are Ready on the real node (and no other
    is left, such as the committed Deployment's on KWOK's nodes before the patch)."""
    now = pods(cluster)
    on_real = all(p["spec"].get("nodeName") == NODE_NAME for p in now)
    return (
        [p["metadata"]["name"] for p in now] if len(now) == 2 and on_real and all(map(ready, now)) else None
    )


def holder(cluster: DevCluster) -> str:
    out = cluster.kubectl(
        "get", "lease", "-n", NS, LEASE, "-o", "jsonpath={.spec.holderIdentity}", check=False
    )
    return out.stdout.strip() if out.returncode == 0 else ""


def pod_of(identity: str) -> str:
    """The Pod a leader-election identity (``<hostname>_<random>``) belongs to: its hostname."""
    return identity.rpartition("_")[0]


def sh(cluster: DevCluster, pod: str, script: str) -> tuple[int, str]:
    """Run a shell script in the operator's container: exit code and output (stdout and stderr)."""
    r = cluster.kubectl("exec", "-n", NS, pod, "-c", "operator", "--", "sh", "-c", script, check=False)
    return r.returncode, (r.stdout + r.stderr).strip()


def helm_processes(cluster: DevCluster, pod: str) -> dict[str, int]:
    """The helm processes a replica started, by command, from its own metrics endpoint."""
    read = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8080/metrics').read().decode())"
    rc, text = sh(cluster, pod, f'python3 -c "{read}"')
    assert rc == 0, text
    out = {}
    for line in text.splitlines():
        m = re.fullmatch(r'helm_operator_helm_processes_total\{command="([^"]+)"\} (\S+)', line)
        if m and float(m[2]):
            out[m[1]] = int(float(m[2]))
    return out


# helm commands that write a release (a new revision, or its removal).
WRITES_A_RELEASE = {"install", "upgrade", "rollback", "uninstall"}


def log(cluster: DevCluster, pod: str) -> str:
    return cluster.kubectl("logs", "-n", NS, pod, "-c", "operator", check=False).stdout


@pytest.fixture(scope="module")
def deployed(cluster: DevCluster, real_node: RealNode) -> Iterator[list[str]]:
    """crds/ and config/ applied and patched as a user does; yields the two Ready Pods' names
    once one of them leads."""
    cluster.kubectl("apply", "-f", str(REPO / "crds"))
    established = ("wait", "--for=condition=Established", "crd", "--all", f"--timeout={within(60):.0f}s")
    cluster.kubectl(*established, timeout=within(70))
    cluster.kubectl("apply", "-f", str(CONFIG))
    cluster.kubectl("patch", "deployment", "-n", NS, NAME, "--patch", json.dumps(PATCH))
    started = time.monotonic()
    try:
        names = eventually(
            lambda: both_ready(cluster), timeout=240, what="both replicas Running and Ready", interval=1
        )
        eventually(lambda: pod_of(holder(cluster)) in names, timeout=60, what="a leader", interval=1)
        print(f"\nboth replicas Ready and one leading {time.monotonic() - started:.1f}s after apply")
        yield names
    except BaseException:
        for p in pods(cluster):
            print(f"--- {p['metadata']['name']} status: {json.dumps(p['status'])[:3000]}")
            print(log(cluster, p["metadata"]["name"])[-4000:])
        raise
    finally:
        # The operator goes before the real node does (its Pods stop at SIGTERM, handing over).
        cluster.kubectl(
            "delete", "deployment", "-n", NS, NAME, "--wait=true", timeout=within(200), check=False
        )
        gone = ("wait", "--for=delete", "pod", "-n", NS, "-l", SELECTOR, f"--timeout={within(180):.0f}s")
        cluster.kubectl(*gone, timeout=within(190), check=False)


def holds(live: Any, committed: Any) -> bool:
    """Whether the live object still says everything the committed one says (the API server adds
    defaults, never drops or changes a field the patch leaves alone)."""
    if isinstance(committed, dict):
        return isinstance(live, dict) and all(k in live and holds(live[k], v) for k, v in committed.items())
    if isinstance(committed, list):
        return isinstance(live, list) and len(live) == len(committed) and all(map(holds, live, committed))
    return bool(live == committed)


def test_the_patch_changes_only_the_image_and_the_placement(cluster: DevCluster, deployed: list[str]) -> None:
    live = _json(cluster, "get", "deployment", "-n", NS, NAME)["spec"]["template"]["spec"]
    committed = DEPLOYMENT["spec"]["template"]["spec"]
    (container,) = live["containers"]
    (before,) = committed["containers"]
    assert container["image"] == IMAGE
    assert not any(e["name"] == "KUBERNETES_SERVICE_HOST" for e in container.get("env") or ())
    assert {k: live[k] for k in PLACEMENT} == PLACEMENT
    unchanged = {k: v for k, v in before.items() if k != "image"}
    assert holds(container, unchanged)
    assert holds(live, {k: v for k, v in committed.items() if k != "containers"})


def test_both_replicas_run_the_image_as_configured(cluster: DevCluster, deployed: list[str]) -> None:
    running = pods(cluster)
    assert sorted(p["metadata"]["name"] for p in running) == sorted(deployed)
    for p in running:
        name = p["metadata"]["name"]
        assert p["spec"]["nodeName"] == NODE_NAME, name
        (status,) = p["status"]["containerStatuses"]
        assert status["image"].endswith(IMAGE.rpartition("/")[2]), status["image"]
        # Never restarted: a restart takes three probes in a row unanswered for 5 s each.
        assert status["restartCount"] == 0, (name, status)
        # The image's user, as the Pod's securityContext demands; the root filesystem is read-only
        # and /tmp (an emptyDir) is where everything the process writes goes.
        assert sh(cluster, name, "id -u; id -g") == (0, "65532\n65532")
        rc, out = sh(cluster, name, "echo x > /probe")
        assert rc != 0 and "Read-only file system" in out, out
        rc, out = sh(cluster, name, "echo x > /opt/helm-operator/probe")
        assert rc != 0 and "Read-only file system" in out, out
        assert sh(cluster, name, "echo x > /tmp/probe && cat /tmp/probe && rm /tmp/probe") == (0, "x")
        # In-cluster configuration: no kubeconfig anywhere, the ServiceAccount's token mounted, and
        # the identity it gives is the operator's ServiceAccount.
        rc, out = sh(
            cluster,
            name,
            'echo "KUBECONFIG=${KUBECONFIG:-}"; ls /tmp/.kube 2>&1 || true; '
            "tr '\\0' ' ' </proc/1/cmdline; echo; "
            "test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token",
        )
        assert rc == 0 and "KUBECONFIG=\n" in out and "--kubeconfig" not in out, out
        assert out.endswith("token"), out
        who = (
            "from kubernetes import client, config; config.load_incluster_config(); "
            "r = client.AuthenticationV1Api().create_self_subject_review("
            "{'apiVersion': 'authentication.k8s.io/v1', 'kind': 'SelfSubjectReview'}); "
            "print(r.status.user_info.username)"
        )
        rc, out = sh(cluster, name, f'python3 -c "{who}"')
        assert (rc, out) == (0, f"system:serviceaccount:{NS}:{SERVICE_ACCOUNT}"), out
    # Exactly one leader: the Lease names one of the two, and only that one says it leads.
    leader = pod_of(holder(cluster))
    assert leader in deployed
    leading = [n for n in deployed if "now holds Lease" in log(cluster, n)]
    assert leading == [leader], {n: log(cluster, n)[-2000:] for n in deployed}


def test_a_sample_is_reconciled_through_it_and_after_a_handover(
    cluster: DevCluster, deployed: list[str], solo_namespace: str
) -> None:
    res = Resources(cluster, solo_namespace)
    cr = yaml.safe_load((REPO / "samples/memcached.yaml").read_text())
    name = cr["metadata"]["name"]
    res.apply(cr)
    res.wait_condition(MEMCACHED, name, "Ready", timeout=180)
    assert res.exists("secret", f"sh.helm.release.v1.{name}.v1")
    assert cluster.kubectl(
        "get", "deployment", "-n", solo_namespace, "-l", f"app.kubernetes.io/instance={name}",
        "-o", "jsonpath={.items[*].spec.replicas}",
    ).stdout == str(cr["spec"]["size"])  # fmt: skip

    leader = pod_of(holder(cluster))
    (standby,) = [n for n in deployed if n != leader]
    assert "now holds Lease" not in log(cluster, standby)
    started = time.monotonic()
    cluster.kubectl("delete", "pod", "-n", NS, leader, "--wait=false")
    # A deliberate stop releases the Lease: a replica takes it at its next retry (2 s), without
    # waiting for the lease duration (15 s) to run out. The Deployment's replacement for the
    # deleted Pod is a candidate as much as the standby (on a loaded node it may start and try
    # first): whichever takes the Lease leads, and is followed from here on.
    try:
        eventually(
            lambda: pod_of(holder(cluster)) not in ("", leader),
            timeout=60,
            what="another replica leading",
            interval=0.2,
        )
    except AssertionError as exc:  # the operators' own words: the deleted Pod's log goes with it
        others = [p["metadata"]["name"] for p in pods(cluster)]
        names = {n: "standby" for n in others if n != leader} | {leader: "the deleted leader"}
        said = {n: log(cluster, n)[-3000:] or "(no log: the Pod is gone)" for n in names}
        raise AssertionError(
            f"{exc}\nLease: {holder(cluster)}\n"
            + "\n".join(f"--- {n} ({names[n]}):\n{text}" for n, text in said.items())
        ) from None
    handover = time.monotonic() - started
    standby = pod_of(holder(cluster))  # the new leader: the standby, or the deleted Pod's replacement
    print(f"\nLease {NS}/{LEASE}: {leader} -> {standby} {handover:.1f}s after the leader's Pod was deleted")
    assert handover < within(10), handover

    # The old leader is gone before the change, so only the new one can act on it; taking over,
    # the new one found the release in sync and changed nothing (no helm process that writes a
    # release; its revision is still the first).
    gone = ("wait", "--for=delete", "pod", "-n", NS, leader, f"--timeout={within(160):.0f}s")
    cluster.kubectl(*gone, timeout=within(170))
    eventually(lambda: ready(_json(cluster, "get", "pod", "-n", NS, standby)), what="the new leader Ready")
    assert not WRITES_A_RELEASE & set(helm_processes(cluster, standby)), helm_processes(cluster, standby)
    assert not res.exists("secret", f"sh.helm.release.v1.{name}.v2")
    res.apply({**cr, "spec": {**cr["spec"], "size": 2}})
    res.wait_condition(MEMCACHED, name, "Ready", timeout=180)
    assert res.exists("secret", f"sh.helm.release.v1.{name}.v2")
    assert cluster.kubectl(
        "get", "deployment", "-n", solo_namespace, "-l", f"app.kubernetes.io/instance={name}",
        "-o", "jsonpath={.items[*].spec.replicas}",
    ).stdout == "2"  # fmt: skip
    # The change is an upgrade of the release the first leader installed (never a new install).
    made = helm_processes(cluster, standby)
    assert made.get("upgrade", 0) >= 1 and "install" not in made, made
    # The Deployment replaced the deleted Pod with a standby; no replica restarted (a probe answered
    # late once is no failure: a restart takes three in a row).
    again = eventually(lambda: both_ready(cluster), timeout=120, what="two Ready replicas again", interval=1)
    assert standby in again
    for p in pods(cluster):
        assert [s["restartCount"] for s in p["status"]["containerStatuses"]] == [0], p["status"]
    assert pod_of(holder(cluster)) == standby

    res.delete(MEMCACHED, name)
    assert not res.exists("secret", f"sh.helm.release.v1.{name}.v2")
