"""The real-node demo's pure parts: its plan, what it prints, and what it applies."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
import yaml

from helm_operator.dev import demo_real
from helm_operator.dev.nodeconfig import LABEL, TAINT_KEY

REPO = Path(__file__).resolve().parents[2]


def test_the_plan_is_a_users_day_two_in_order() -> None:
    keys = [s.key for s in demo_real.plan(500)]
    assert keys == ["cluster", "operator", "create", "write", "backup", "failover", "restore", "teardown"]
    assert "500 rows" in demo_real.plan(500)[3].title


def test_a_failing_step_is_named_timed_and_ends_the_demo() -> None:
    out = io.StringIO()
    steps = demo_real.Steps(demo_real.plan(10), out)
    with steps.step("create"):
        steps.say("kubectl apply: PostgreSQLCluster shop")
    with pytest.raises(demo_real.StepFailed) as failed, steps.step("backup"):
        raise demo_real.StepFailed("backup shop-x failed: pg_dump: connection refused")
    assert str(failed.value) == (
        "demo failed at step 5/8 (backup: take a backup on request (helm-operator.io/action=backup-now)): "
        "backup shop-x failed: pg_dump: connection refused"
    )
    printed = out.getvalue().splitlines()
    assert printed[0] == "[3/8] create PostgreSQLCluster 'shop': 3 instances placed on the real node"
    assert printed[1] == "      kubectl apply: PostgreSQLCluster shop"
    assert printed[2].startswith("      done in ") and printed[2].endswith(" s")
    assert printed[3].startswith("[5/8] take a backup")
    assert len(printed) == 4  # no "done" for the failed step
    assert [s.key for s, _ in steps.timings] == ["create", "backup"]


def test_an_unexpected_error_is_named_too() -> None:
    steps = demo_real.Steps(demo_real.plan(10), io.StringIO())
    with (
        pytest.raises(demo_real.StepFailed, match=r"step 1/8 \(cluster: .*\): KeyError"),
        steps.step("cluster"),
    ):
        raise KeyError
    assert steps.timings[0][0].key == "cluster"


def test_the_summary_gives_each_step_and_the_total() -> None:
    plan = demo_real.plan(10)
    lines = demo_real.summary([(plan[0], 40.25), (plan[3], 1.5)])
    assert lines == ["step times:", "  cluster     40.2 s", "  write        1.5 s", "  total       41.8 s"]


def test_listing_and_sizes() -> None:
    text = "shop-backup-now-1.sql.gz 123456\n\nlost+found x\nother 7\n"
    assert demo_real.listing(text) == {"shop-backup-now-1.sql.gz": 123456, "other": 7}
    assert demo_real.size_text(123456) == "0.1 MB"
    assert demo_real.size_text(2_345) == "2.3 kB"


def _schema_properties() -> dict[str, object]:
    for path in (REPO / "crds").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["spec"]["names"]["kind"] == "PostgreSQLCluster":
                version = next(v for v in doc["spec"]["versions"] if v.get("storage"))
                props: dict[str, object] = version["schema"]["openAPIV3Schema"]["properties"]["spec"][
                    "properties"
                ]
                return props
    raise AssertionError("no PostgreSQLCluster CRD in crds/")


def test_the_clusters_land_on_the_real_node_with_fields_the_crd_knows() -> None:
    doc = demo_real.postgresql_cluster("shop", "pw", replicas=3, failoverDelay="5s")
    spec = doc["spec"]
    assert spec["nodeSelector"] == {LABEL: "true"}
    assert spec["tolerations"] == [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["imagePullPolicy"] == "Never" and spec["imageRepository"].startswith("localhost/")
    assert set(spec) <= set(_schema_properties()), set(spec) - set(_schema_properties())
    restored = demo_real.postgresql_cluster("r", "pw", replicas=1, restore={"fromBackup": "b"})
    assert restored["spec"]["restore"] == {"fromBackup": "b"} and restored["spec"]["replicas"] == 1


def test_the_lister_runs_on_the_real_node_reading_the_claim() -> None:
    pod = demo_real.lister_pod("ls-1", "shop-backups")["spec"]
    assert pod["nodeSelector"] == {LABEL: "true"} and pod["restartPolicy"] == "Never"
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "shop-backups", "readOnly": True}
    assert pod["containers"][0]["imagePullPolicy"] == "Never"


def test_the_real_nodes_start_is_split_into_waiting_images_and_joining() -> None:
    phases = demo_real.NodeStart(100.0, list)
    assert phases.lines(130.0) == ["real node joined in 30.0 s"]  # the images were never asked for
    phases.locked, phases.imaged = 160.0, 163.5
    assert phases.lines(190.0) == [
        "waited 60.0 s for the machine's real node",
        "images ready in 3.5 s",
        "real node joined (containerd, kubelet, kube-proxy, CoreDNS) in 26.5 s",
    ]
    phases.locked = 100.2
    assert phases.lines(190.0)[0] == "the real node was free"
    assert demo_real.NodeStart(0.0, lambda: [Path("a.tar")]).images() == [Path("a.tar")]


def test_a_heartbeat_while_another_run_holds_the_real_node_and_none_after() -> None:
    said: list[str] = []
    phases = demo_real.NodeStart(0.0, list)
    with demo_real.heartbeat(phases, said.append, every=0.05):
        time.sleep(0.18)
        phases.locked = 1.0
        time.sleep(0.15)
    assert 1 <= len(said) <= 4 and all(
        s.startswith("still waiting for the machine's real node (") for s in said
    )
    count = len(said)
    time.sleep(0.1)
    assert len(said) == count


def test_the_node_gets_every_image_the_demo_runs_and_no_other() -> None:
    from helm_operator.dev.nodeconfig import PAUSE_IMAGE

    spec = demo_real.postgresql_cluster("shop", "pw", replicas=3)["spec"]
    used = {
        PAUSE_IMAGE,
        f"{spec['imageRepository']}:{spec['version']}",
        demo_real.lister_pod("ls", "c")["spec"]["containers"][0]["image"],
    }
    assert set(demo_real.IMAGES) == used


def test_sigterm_and_a_background_sigint_end_the_demo_through_its_teardown() -> None:
    import os
    import signal

    before, interrupt = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell starts a background command
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with pytest.raises(KeyboardInterrupt), demo_real.interruptible():
                os.kill(os.getpid(), sig)
                time.sleep(1)
        assert signal.getsignal(signal.SIGTERM) == before
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, interrupt)
