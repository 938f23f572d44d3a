"""API versions on the local control plane: a kind first served as v1 (``spec.message``, chart
1.x) gains v2 (``spec.greeting.text``, chart 2.x, where the value was renamed); the operator,
upgraded to v2 with Python converters, serves the conversion webhook on loopback with a CA of its
own in the CRD's caBundle. Objects of both versions read in both, a round trip loses nothing, a
converter that raises is the client's error message, storage is migrated and ``storedVersions``
trimmed, and with the webhook gone writes fail with the API server's message."""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import Helm, releases
from .operator import REPO, OperatorProcess, Resources, eventually, free_port, metrics, probe
from .pace import lease_timings

GROUP = "conv.test.helm-operator.io"
CRD = f"greetings.{GROUP}"
KEPT = f"{GROUP}/v2-greeting"
READABLE = f"helm-operator.readable.{CRD}"  # the operator's check that a write can be read back


def crd(versions: list[str], storage: str) -> dict[str, Any]:
    schemas = {
        "v1": {"message": {"type": "string"}},
        "v2": {
            "greeting": {
                "type": "object",
                "properties": {"text": {"type": "string"}, "emphasis": {"type": "boolean"}},
            }
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": "Greeting",
                "plural": "greetings",
                "singular": "greeting",
                "listKind": "GreetingList",
            },
            "versions": [
                {
                    "name": v,
                    "served": True,
                    "storage": v == storage,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "properties": schemas[v]},
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
                for v in versions
            ],
        },
    }


def chart(root: Path, version: str, text: str) -> Path:
    path = root / f"greeting-{version}"
    (path / "templates").mkdir(parents=True)
    (path / "Chart.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v2", "name": "greeting", "version": version})
    )
    (path / "values.yaml").write_text("{}\n")
    (path / "templates/configmap.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-greeting\n"
        f'data:\n  text: {{{{ {text} | default "" | quote }}}}\n'
    )
    return path


def greeting(version: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{version}", "kind": "Greeting", "metadata": {"name": name}, "spec": spec}


def read(cluster: DevCluster, ns: str, version: str, name: str) -> dict[str, Any]:
    out = cluster.kubectl("get", f"greetings.{version}.{GROUP}", name, "-n", ns, "-o", "json")
    return dict(json.loads(out.stdout))


def apply(
    cluster: DevCluster, doc: dict[str, Any], ns: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(doc), check=check)


def revision(helm: Helm, ns: str, name: str) -> int:
    return int(releases(helm, ns)[name]["revision"])


def configmap_text(res: Resources, name: str) -> str:
    return str((res.get("configmap", f"{name}-greeting") or {}).get("data", {}).get("text"))


def test_two_api_versions_converted_by_python_through_the_operator_s_webhook(
    cluster: DevCluster, tools: Toolchain, helm4: Helm, solo_namespace: str, tmp_path: Path
) -> None:
    ns, res = solo_namespace, Resources(cluster, solo_namespace)
    cluster.kubectl("delete", "crd", CRD, "--ignore-not-found", "--timeout=60s", check=False, timeout=90)
    apply(cluster, crd(["v1"], "v1"), "default")
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{CRD}", "--timeout=60s")
    watch = {"group": GROUP, "kind": "Greeting", "timeout": "60s", "reconcilePeriod": "20s"}
    w1 = tmp_path / "w1.yaml"
    w1.write_text(
        yaml.safe_dump(
            [{**watch, "version": "v1", "chart": str(chart(tmp_path, "1.0.0", ".Values.message"))}]
        )
    )
    w2 = tmp_path / "w2.yaml"
    w2.write_text(
        yaml.safe_dump(
            [
                {
                    **watch,
                    "version": "v2",
                    "chart": str(chart(tmp_path, "2.0.0", ".Values.greeting.text")),
                    "hooks": str(REPO / "tests/e2e/hooks/greeting_versions.py"),
                }
            ]
        )
    )
    port = free_port()
    secret = f"conversion-{ns[-4:]}"
    args = ["--retry-base", "1", "--retry-cap", "4", "--conversion-bind-address", f"127.0.0.1:{port}"]
    args += ["--conversion-secret", f"default/{secret}"]
    (tmp_path / "op").mkdir()
    op = OperatorProcess(cluster, tools.helm, tmp_path / "op", w1, [ns], extra_args=args)
    op.start()
    try:
        old = greeting("v1", "old", {"message": "hello"})
        apply(cluster, old, ns)
        res.wait_condition(f"greetings.{GROUP}", "old", "Ready", timeout=90)
        assert configmap_text(res, "old") == "hello" and revision(helm4, ns, "old") == 1
        op.stop()

        # The operator's next version: v2 served beside v1 (stored still as v1), v2 the hub.
        apply(cluster, crd(["v1", "v2"], "v1"), "default")
        # A module with one way only: start-up refuses, naming the missing pair (exit 2).
        one_way = tmp_path / "one_way.py"
        source = (REPO / "tests/e2e/hooks/greeting_versions.py").read_text()
        one_way.write_text(source.replace('@hooks.convert("v2", "v1")\n', ""))
        w_one = tmp_path / "w_one.yaml"
        w_one.write_text(
            w2.read_text().replace(str(REPO / "tests/e2e/hooks/greeting_versions.py"), str(one_way))
        )
        cmd = [sys.executable, "-m", "helm_operator.cli", "run", "--watches-file", str(w_one)]
        cmd += ["--namespace", ns, "--kubeconfig", str(cluster.kubeconfig), "--helm", str(tools.helm), *args]
        refused = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2 and "no converter goes v2 -> v1" in refused.stderr, refused
        # The old operator (no converters at all) on the new CRD: refused too, nothing reconciled
        # from specs the API server would hand over pruned.
        cmd[cmd.index(str(w_one))] = str(w1)
        refused = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2, refused
        assert f"CRD {CRD} serves v1, v2 with different schemas and no converter" in refused.stderr, refused
        op.watches = w2
        op.start()
        conv = eventually(
            lambda: (
                (
                    c := json.loads(cluster.kubectl("get", "crd", CRD, "-o", "json").stdout)["spec"][
                        "conversion"
                    ]
                ).get("strategy")
                == "Webhook"
                and c
            ),
            timeout=60,
            what="the CRD converting through the webhook",
        )
        config = conv["webhook"]["clientConfig"]
        assert config["url"] == f"https://127.0.0.1:{port}/convert" and config["caBundle"], config
        # The v1 resource feeds the v2 chart through conversion: same text, the renamed value.
        eventually(lambda: revision(helm4, ns, "old") == 2, timeout=90, what="old on chart 2.0.0")
        assert configmap_text(res, "old") == "hello"
        as_v2 = read(cluster, ns, "v2", "old")
        assert as_v2["spec"] == {"greeting": {"text": "hello"}}, as_v2
        assert read(cluster, ns, "v1", "old")["spec"] == {"message": "hello"}

        # A v2 resource, read as v1 (emphasis kept aside) and written back as v1: nothing lost.
        apply(cluster, greeting("v2", "new", {"greeting": {"text": "hi", "emphasis": True}}), ns)
        res.wait_condition(f"greetings.{GROUP}", "new", "Ready", timeout=90)
        as_v1 = read(cluster, ns, "v1", "new")
        assert as_v1["spec"] == {"message": "hi"} and KEPT in as_v1["metadata"]["annotations"], as_v1
        back = copy.deepcopy(as_v1)
        back["metadata"] = {"name": "new", "annotations": {KEPT: as_v1["metadata"]["annotations"][KEPT]}}
        apply(cluster, back, ns)
        assert read(cluster, ns, "v2", "new")["spec"] == {"greeting": {"text": "hi", "emphasis": True}}
        # Written as v1 again (same meaning): no new revision for either.
        apply(cluster, old, ns)
        before = {n: revision(helm4, ns, n) for n in ("old", "new")}
        time.sleep(25)  # a resync period and more: a conversion alone makes no revision
        assert {n: revision(helm4, ns, n) for n in ("old", "new")} == before == {"old": 2, "new": 1}

        # A converter that raises: the client sees its message (the operator's check of the write
        # refuses it before the API server would convert it to store it), nothing is stored.
        refused = apply(cluster, greeting("v2", "boom", {"greeting": {"text": "boom"}}), ns, check=False)
        assert refused.returncode != 0 and "greeting.text 'boom' has no v1 form" in refused.stderr, (
            refused.stderr
        )
        assert not res.exists(f"greetings.{GROUP}", "boom")
        seen = metrics(op.metrics_port)
        assert seen['helm_operator_conversions_total{kind="Greeting",result="Success"}'] > 0
        assert seen['helm_operator_conversion_writes_refused_total{kind="Greeting"}'] >= 1

        # Storage moves to v2: migrated, storedVersions trimmed; safe to run twice.
        apply(cluster, crd(["v1", "v2"], "v2"), "default")
        stored = json.loads(cluster.kubectl("get", "crd", CRD, "-o", "json").stdout)["status"][
            "storedVersions"
        ]
        assert stored == ["v1", "v2"], stored
        for _ in range(2):
            run = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "helm_operator.cli",
                    "migrate-storage",
                    CRD,
                    "--kubeconfig",
                    str(cluster.kubeconfig),
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert run.returncode == 0 and "2 objects stored as v2" in run.stdout, run
        stored = json.loads(cluster.kubectl("get", "crd", CRD, "-o", "json").stdout)["status"][
            "storedVersions"
        ]
        assert stored == ["v2"], stored
        assert {n: revision(helm4, ns, n) for n in ("old", "new")} == {"old": 2, "new": 1}

        # Stored as v2, a v2 object with no v1 form needs no conversion to be stored: refused all
        # the same, by the operator's check of writes (stored, it would fail every read as v1).
        checked = json.loads(
            cluster.kubectl("get", "validatingwebhookconfiguration", READABLE, "-o", "json").stdout
        )
        assert checked["webhooks"][0]["clientConfig"]["url"] == f"https://127.0.0.1:{port}/readable", checked
        refused = apply(cluster, greeting("v2", "boom", {"greeting": {"text": "boom"}}), ns, check=False)
        assert refused.returncode != 0 and "it could not be read as v1" in refused.stderr, refused.stderr
        assert "greeting.text 'boom' has no v1 form" in refused.stderr, refused.stderr
        assert not res.exists(f"greetings.{GROUP}", "boom")
        listed = json.loads(cluster.kubectl("get", f"greetings.v1.{GROUP}", "-n", ns, "-o", "json").stdout)
        assert sorted(i["metadata"]["name"] for i in listed["items"]) == ["new", "old"], listed

        # The webhook unreachable (the CRD pointed elsewhere) while the operator runs: a v1 write
        # needs a conversion and fails with the API server's message; the operator keeps running
        # and says so (log, gauge); its next start points the CRD back at itself.
        wrong = {
            "spec": {"conversion": {"webhook": {"clientConfig": {"url": "https://127.0.0.1:1/convert"}}}}
        }
        cluster.kubectl("patch", "crd", CRD, "--type=merge", "-p", json.dumps(wrong))
        gone = apply(cluster, greeting("v1", "old", {"message": "changed"}), ns, check=False)
        assert gone.returncode != 0 and "conversion webhook" in gone.stderr, gone.stderr
        eventually(
            lambda: "cannot reach the conversion webhook for " + CRD in op.log(),
            timeout=40,
            what="the operator says so",
        )
        reachable = f'helm_operator_conversion_webhook_reachable{{crd="{CRD}"}}'
        assert metrics(op.metrics_port)[reachable] == 0.0
        assert op.proc is not None and op.proc.poll() is None, "the operator keeps running"
        op.stop()
        op.start()
        eventually(lambda: metrics(op.metrics_port).get(reachable) == 1.0, timeout=60, what="reachable again")
        assert read(cluster, ns, "v1", "old")["spec"] == {"message": "hello"}, (
            "the refused write changed nothing"
        )
        # Stopped, no replica serves it: writes that need a conversion fail the same way.
        op.stop()
        down = apply(cluster, greeting("v1", "old", {"message": "changed"}), ns, check=False)
        assert down.returncode != 0 and "conversion webhook" in down.stderr, down.stderr
        op.start()
    finally:
        if op.proc is None or op.proc.poll() is not None:
            op.start()
        for name in ("old", "new"):
            cluster.kubectl(
                "delete",
                f"greetings.{GROUP}",
                name,
                "-n",
                ns,
                "--ignore-not-found",
                "--timeout=120s",
                check=False,
                timeout=150,
            )
        op.stop()
        cluster.kubectl("delete", "crd", CRD, "--ignore-not-found", check=False)
        cluster.kubectl(
            "delete", "validatingwebhookconfiguration", READABLE, "--ignore-not-found", check=False
        )
        cluster.kubectl("delete", "secret", secret, "-n", "default", "--ignore-not-found", check=False)


def test_a_standby_serves_conversions_and_the_next_leader_keeps_serving_them(
    cluster: DevCluster, tools: Toolchain, helm4: Helm, solo_namespace: str, tmp_path: Path
) -> None:
    """Two replicas with one certificate Secret: the standby's webhook converts through the API
    server (the CRD pointed at it, as a Service picks any replica), and when the leader stops the
    standby leads and keeps the kind readable and writable in both versions."""
    ns, res = solo_namespace, Resources(cluster, solo_namespace)
    cluster.kubectl("delete", "crd", CRD, "--ignore-not-found", "--timeout=60s", check=False, timeout=90)
    apply(cluster, crd(["v1", "v2"], "v1"), "default")
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{CRD}", "--timeout=60s")
    watches = tmp_path / "w2.yaml"
    entry = {
        "group": GROUP,
        "kind": "Greeting",
        "version": "v2",
        "timeout": "60s",
        "chart": str(chart(tmp_path, "2.0.0", ".Values.greeting.text")),
        "hooks": str(REPO / "tests/e2e/hooks/greeting_versions.py"),
    }
    watches.write_text(yaml.safe_dump([entry]))
    secret = f"conversion-ha-{ns[-4:]}"
    replicas: list[tuple[OperatorProcess, int, int]] = []
    lease, renew, retry = lease_timings()
    try:
        for i in range(2):
            port, probes = free_port(), free_port()
            args = ["--retry-base", "1", "--retry-cap", "4", "--leader-elect"]
            args += ["--leader-election-namespace", ns, "--leader-election-id", "conversion-ha"]
            args += ["--leader-election-lease-duration", str(lease)]
            args += ["--leader-election-renew-deadline", str(renew)]
            args += [
                "--leader-election-retry-period",
                str(retry),
                "--health-probe-bind-address",
                f"127.0.0.1:{probes}",
            ]
            args += [
                "--conversion-bind-address",
                f"127.0.0.1:{port}",
                "--conversion-secret",
                f"default/{secret}",
            ]
            (tmp_path / f"op{i}").mkdir()
            op = OperatorProcess(
                cluster, tools.helm, tmp_path / f"op{i}", watches, [ns], extra_args=args,
                started="conversion webhook on",
            )  # fmt: skip
            op.start()
            replicas.append((op, port, probes))
            if i == 0:
                eventually(functools.partial(leads, probes), timeout=60, what="the first replica leads")
        (leader, leader_port, _), (standby, standby_port, standby_probes) = replicas
        assert role(standby_probes) == "standby"

        def url() -> str:
            crd_now = json.loads(cluster.kubectl("get", "crd", CRD, "-o", "json").stdout)
            return str(crd_now["spec"]["conversion"].get("webhook", {}).get("clientConfig", {}).get("url"))

        eventually(lambda: url() == f"https://127.0.0.1:{leader_port}/convert", timeout=60, what="injected")
        apply(cluster, greeting("v1", "first", {"message": "hello"}), ns)  # stored as v1, read as v2
        res.wait_condition(f"greetings.{GROUP}", "first", "Ready", timeout=90)
        assert configmap_text(res, "first") == "hello"

        # The CRD pointed at the standby (same caBundle: the certificate Secret is shared).
        pointed = {
            "spec": {
                "conversion": {
                    "webhook": {"clientConfig": {"url": f"https://127.0.0.1:{standby_port}/convert"}}
                }
            }
        }
        cluster.kubectl("patch", "crd", CRD, "--type=merge", "-p", json.dumps(pointed))
        success = 'helm_operator_conversions_total{kind="Greeting",result="Success"}'
        before = metrics(standby.metrics_port).get(success, 0.0)
        assert read(cluster, ns, "v2", "first")["spec"] == {"greeting": {"text": "hello"}}
        apply(cluster, greeting("v2", "second", {"greeting": {"text": "hi", "emphasis": True}}), ns)
        assert read(cluster, ns, "v1", "second")["spec"] == {"message": "hi"}
        assert metrics(standby.metrics_port).get(success, 0.0) > before, "the standby converted them"
        assert role(standby_probes) == "standby"

        # The leader stops: the standby leads, points the CRD at itself and reconciles both.
        leader.stop()
        eventually(lambda: role(standby_probes) == "leader", timeout=60, what="the standby leads")
        eventually(
            lambda: url() == f"https://127.0.0.1:{standby_port}/convert", timeout=60, what="re-injected"
        )
        res.wait_condition(f"greetings.{GROUP}", "second", "Ready", timeout=90)
        apply(cluster, greeting("v1", "first", {"message": "bye"}), ns)
        eventually(lambda: configmap_text(res, "first") == "bye", timeout=90, what="a v1 change reconciled")
        assert configmap_text(res, "second") == "hi"
        assert read(cluster, ns, "v2", "first")["spec"] == {"greeting": {"text": "bye"}}
    finally:
        for name in ("first", "second"):
            cluster.kubectl(
                "delete", f"greetings.{GROUP}", name, "-n", ns, "--ignore-not-found", "--timeout=120s",
                check=False, timeout=150,
            )  # fmt: skip
        for op, _, _ in replicas:
            op.stop()
        cluster.kubectl("delete", "crd", CRD, "--ignore-not-found", check=False)
        cluster.kubectl(
            "delete", "validatingwebhookconfiguration", READABLE, "--ignore-not-found", check=False
        )
        cluster.kubectl("delete", "secret", secret, "-n", "default", "--ignore-not-found", check=False)


def leads(probes: int) -> bool:
    return role(probes) == "leader"


def role(probes: int) -> str:
    try:
        return str(probe(probes, "/readyz")[1]["role"])
    except OSError:
        return "down"
