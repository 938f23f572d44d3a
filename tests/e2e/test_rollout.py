"""Staged rollouts on the local control plane: a fleet of 30 resources in three waves (by label,
then the rest). A new chart version whose template breaks on the second wave's configuration
halts the rollout after that wave: the wave is back on the old version, the third never moved,
and the Rollout's status, the Events and the metrics say so. Aborted, it keeps its failures counted,
lifts its pause, and lets a resource that never moved take a change of its own. A good version then
goes wave by wave, each wave only after the one before was Ready for ``minReadySeconds``; a pause
holds it, and a canary held by its own maintenance window is named as what holds its wave up."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
import time
from math import ceil
from pathlib import Path
from typing import Any

import yaml

from helm_operator.core.naming import WINDOWS_ANNOTATION
from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .conftest import TINY_WATCH, Helm, releases, tiny
from .operator import REPO, OperatorProcess, Resources, eventually, metrics
from .pace import within

TINY = "tinies.test.helm-operator.io"
WATCH_KEY = "Tiny.v1.test.helm-operator.io"
MIN_READY = 6  # seconds
WAVES = {"canary": 3, "early": 9, "rest": 18}
BROKEN = 3  # resources of the early wave whose configuration the broken version cannot render


def chart_version(root: Path, version: str, breaks_on: str | None = None) -> Path:
    """The tiny chart as ``version``; its ConfigMap says the version, and it fails to render for
    resources whose message is ``breaks_on``."""
    path = root / f"tiny-{version}"
    shutil.copytree(REPO / "tests/e2e/charts/tiny", path)
    chart = yaml.safe_load((path / "Chart.yaml").read_text())
    (path / "Chart.yaml").write_text(yaml.safe_dump({**chart, "version": version}))
    template = path / "templates/configmap.yaml"
    text = template.read_text().replace("\ndata:\n", f'\ndata:\n  chartVersion: "{version}"\n', 1)
    if breaks_on:
        broken = f'if eq .Values.message "{breaks_on}" }}}}{{{{ fail "cannot render {breaks_on}" }}}}'
        text += f"{{{{- {broken}{{{{- end }}}}\n"
    template.write_text(text)
    return path


def fleet() -> list[dict[str, Any]]:
    docs = []
    for wave, count in WAVES.items():
        for i in range(count):
            doc = tiny(f"{wave}-{i}")
            if wave != "rest":
                doc["metadata"]["labels"] = {"ring": wave}
            if wave == "early" and i < BROKEN:
                doc["spec"]["message"] = "edge"
            docs.append(doc)
    return docs


def watches_file(path: Path, chart: Path) -> Path:
    watch = {**TINY_WATCH, "chart": str(chart), "maxConcurrentReconciles": 4, "reconcilePeriod": "60s"}
    watch["rollout"] = {
        "waves": [
            {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}},
            {"name": "early", "selector": {"matchLabels": {"ring": "early"}}},
            {"name": "rest", "percent": 100},
        ],
        "minReadySeconds": MIN_READY,
        "maxFailures": BROKEN - 1,  # the halt comes with the last broken one: all of them counted
        "progressDeadline": "90s",
    }
    path.write_text(yaml.safe_dump([watch]))
    return path


def rollout(cluster: DevCluster) -> dict[str, Any]:
    out = cluster.kubectl("get", "rollouts.helm-operator.io", TINY, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def charts(helm: Helm, ns: str) -> dict[str, str]:
    return {name: str(r["chart"]) for name, r in releases(helm, ns).items()}


def wave_of(name: str) -> str:
    return name.rsplit("-", 1)[0]


def updated(record: dict[str, Any]) -> dt.datetime:
    day, clock, offset = record["updated"].split()[:3]
    return dt.datetime.strptime(f"{day} {clock[:15]} {offset}", "%Y-%m-%d %H:%M:%S.%f %z")


def cli(cluster: DevCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "helm_operator.cli",
            "rollout",
            *args,
            "--kubeconfig",
            str(cluster.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_fleet_rolls_out_wave_by_wave_halts_on_a_broken_wave_and_rolls_it_back(
    cluster: DevCluster, crds: None, tools: Toolchain, helm4: Helm, solo_namespace: str, tmp_path: Path
) -> None:
    ns = solo_namespace
    cluster.kubectl("delete", "rollouts.helm-operator.io", TINY, "--ignore-not-found")
    res = Resources(cluster, ns)
    v1 = chart_version(tmp_path, "0.1.0")
    (tmp_path / "op").mkdir()
    op = OperatorProcess(cluster, tools.helm, tmp_path / "op", watches_file(tmp_path / "w1.yaml", v1), [ns])
    op.start()
    try:
        for doc in fleet():
            res.apply(doc)
        names = [d["metadata"]["name"] for d in fleet()]
        eventually(
            lambda: len(charts(helm4, ns)) == 30 and set(charts(helm4, ns).values()) == {"tiny-0.1.0"},
            timeout=180,
            what="30 releases of 0.1.0",
        )
        # The first rollout (nothing to move: every release was installed with these inputs) completes.
        first = eventually(
            lambda: (r := rollout(cluster)).get("status", {}).get("phase") == "Complete" and r,
            timeout=120,
            what="the first rollout complete",
        )
        assert first["status"]["updated"] == "30/30", first["status"]
        assert [(w["name"], w["resources"]) for w in first["status"]["waves"]] == list(WAVES.items())
        op.stop()

        # A new version that breaks on the early wave's configuration: canary goes, early halts.
        v2 = chart_version(tmp_path, "0.2.0", breaks_on="edge")
        op.watches = watches_file(tmp_path / "w2.yaml", v2)
        op.start()
        halted = eventually(
            lambda: (r := rollout(cluster)).get("status", {}).get("phase") == "Halted" and r,
            timeout=240,
            what="the rollout halted at the early wave",
        )
        status = halted["status"]
        assert status["wave"] == "early" and status["rollout"] != first["status"]["rollout"], status
        failed = {f["resource"].split("/")[1] for f in status["failures"]}
        assert failed == {f"early-{i}" for i in range(BROKEN)}, status["failures"]
        assert all("cannot render edge" in f["message"] for f in status["failures"]), status["failures"]

        def early_back() -> bool:
            now = charts(helm4, ns)
            return all(now[n] == "tiny-0.1.0" for n in names if wave_of(n) == "early")

        eventually(early_back, timeout=120, what="the early wave back on 0.1.0")
        time.sleep(3)  # nothing moves after the halt
        now, recs = charts(helm4, ns), releases(helm4, ns)
        assert all(now[n] == "tiny-0.2.0" for n in names if wave_of(n) == "canary"), now
        assert all(now[n] == "tiny-0.1.0" for n in names if wave_of(n) != "canary"), now
        assert all(int(recs[n]["revision"]) == 1 for n in names if wave_of(n) == "rest"), "rest never moved"
        went = [n for n in names if wave_of(n) == "early" and int(recs[n]["revision"]) > 1]
        assert went, "some of the early wave upgraded before the halt and were rolled back"
        # What each resource says: the rolled back one and one of the rest that still waits.
        back = res.wait_condition(TINY, went[0], "Ready", timeout=60)
        assert back["reason"] == "RolloutRolledBack", back
        res.wait_event(went[0], "RolloutRolledBack")
        rest = (res.get(TINY, "rest-0") or {})["status"]
        assert rest["rollout"]["state"] == "Waiting" and rest["rollout"]["rollout"] == status["rollout"], rest
        ready = next(c for c in rest["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True" and ready["reason"] == "RolloutPending", ready
        events = cluster.kubectl(
            "get", "events", "-n", "default", "--field-selector", f"involvedObject.name={TINY}", "-o", "json"
        )
        reasons = [e["reason"] for e in json.loads(events.stdout)["items"]]
        assert "RolloutHalted" in reasons and "WaveCompleted" in reasons, reasons
        seen = metrics(op.metrics_port)
        assert seen[f'helm_operator_rollout_wave{{phase="Halted",watch="{WATCH_KEY}"}}'] == 2.0
        assert seen[f'helm_operator_rollout_resources{{state="failed",watch="{WATCH_KEY}"}}'] == len(failed)
        told = cli(cluster, "status", TINY)
        assert told.returncode == 0 and "Halted" in told.stdout and sorted(failed)[0] in told.stdout, told
        # Who is in a wave that never started is known all the same.
        unstarted = next(w for w in status["waves"] if w["name"] == "rest")
        assert "admittedAt" not in unstarted, unstarted
        assert unstarted["members"] == sorted(f"{ns}/rest-{i}" for i in range(WAVES["rest"])), unstarted
        assert f"    members: {ns}/rest-0, {ns}/rest-1" in told.stdout, told.stdout

        # Paused, then aborted: the pause goes with the rollout, the failures stay counted, and a
        # resource that never moved keeps what it runs until a change of its own spec.
        assert cli(cluster, "pause", TINY).returncode == 0
        assert cli(cluster, "abort", TINY).returncode == 0
        aborted = eventually(
            lambda: (r := rollout(cluster)).get("status", {}).get("phase") == "Aborted" and r,
            timeout=60,
            what="the rollout aborted",
        )
        assert not aborted["spec"].get("paused"), aborted["spec"]
        # Those that waited for a wave are told at once (not at their next resync, a minute away).
        eventually(
            lambda: "was aborted" in res.condition(TINY, "rest-2", "Reconciling").get("message", ""),
            timeout=30,
            what="rest-2 saying its rollout was aborted",
        )
        counted = {w["name"]: w.get("failed", 0) for w in aborted["status"]["waves"]}
        assert counted["early"] == BROKEN, aborted["status"]
        eventually(
            lambda: (
                metrics(op.metrics_port)[
                    f'helm_operator_rollout_resources{{state="failed",watch="{WATCH_KEY}"}}'
                ]
                == BROKEN
            ),
            timeout=30,
            what="the failures still counted by the metric",
        )
        res.apply(tiny("rest-1", message="its own change"))
        eventually(
            lambda: charts(helm4, ns)["rest-1"] == "tiny-0.2.0",
            timeout=60,
            what="rest-1's own change applied",
        )
        res.wait_condition(TINY, "rest-1", "Ready", timeout=60)
        assert charts(helm4, ns)["rest-2"] == "tiny-0.1.0", "a resource without a change of its own stays"
        op.stop()

        # A good version, paused first: nothing starts until it is resumed, then wave by wave; a
        # canary held by a maintenance window of its own holds its wave up, and the Rollout says so.
        assert cli(cluster, "pause", TINY).returncode == 0
        held = tiny("canary-0")
        held["metadata"].update(
            labels={"ring": "canary"}, annotations={WINDOWS_ANNOTATION: "0 0 1 1 * 1m UTC"}
        )
        res.apply(held)
        v3 = chart_version(tmp_path, "0.3.0")
        op.watches = watches_file(tmp_path / "w3.yaml", v3)
        op.start()
        eventually(
            lambda: rollout(cluster).get("status", {}).get("phase") == "Paused", timeout=60, what="paused"
        )
        time.sleep(MIN_READY)
        assert "tiny-0.3.0" not in charts(helm4, ns).values(), "a paused rollout starts no wave"
        resumed = cli(cluster, "resume", TINY)
        assert resumed.returncode == 0, resumed
        # The other two canaries are updated meanwhile (on a loaded machine the held one is named
        # first): the wave waits on the held one alone.
        eventually(
            lambda: (
                "canary-0 (UpgradePending)" in (m := rollout(cluster).get("status", {}).get("message", ""))
                and "wave canary: 2/3 updated" in m
            ),
            timeout=120,
            what="the Rollout naming the canary its window holds, the other two updated",
        )
        released = tiny("canary-0")
        released["metadata"]["labels"] = {"ring": "canary"}
        res.apply(released)  # its window annotation removed: the wave goes on
        done = eventually(
            lambda: (r := rollout(cluster)).get("status", {}).get("phase") == "Complete" and r,
            timeout=300,
            what="the good rollout complete",
        )
        recs = releases(helm4, ns)
        assert {str(r["chart"]) for r in recs.values()} == {"tiny-0.3.0"}, charts(helm4, ns)
        # Each wave started only after the one before was Ready for minReadySeconds (Helm's own times).
        times = {w: [updated(recs[n]) for n in names if wave_of(n) == w] for w in WAVES}
        for before, after in (("canary", "early"), ("early", "rest")):
            gap = (min(times[after]) - max(times[before])).total_seconds()
            assert gap >= MIN_READY, (before, after, gap)
        waves = {w["name"]: w for w in done["status"]["waves"]}
        assert all(waves[w]["updated"] == WAVES[w] for w in WAVES), waves
        assert (
            metrics(op.metrics_port)[f'helm_operator_rollout_wave{{phase="Complete",watch="{WATCH_KEY}"}}']
            == 3.0
        )
    finally:
        op.stop()
        cluster.kubectl("delete", "rollouts.helm-operator.io", TINY, "--ignore-not-found", check=False)


# A test Job that fails at once on any machine: its Pod cannot be placed and the Job may run for
# one second (DeadlineExceeded). (A bare test Pod would never finish on KWOK's fake nodes: its
# `helm test` would fail only when the timeout below runs out.)
TEST_FAILING_JOB = """apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-check
  annotations:
    helm.sh/hook: test
    helm.sh/hook-delete-policy: before-hook-creation
spec:
  backoffLimit: 0
  activeDeadlineSeconds: 1
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {no-such-node: "true"}
      containers:
        - {name: check, image: registry.example/check:1.0, command: ["false"]}
"""
# A Job's Pod completes on KWOK's fake nodes: the passing test.
TEST_JOB = """apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-check
  annotations:
    helm.sh/hook: test
    helm.sh/hook-delete-policy: before-hook-creation
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
        - {name: check, image: registry.example/check:1.0, command: ["true"]}
"""


def test_a_wave_gated_on_helm_test_halts_when_the_chart_s_tests_fail_and_goes_on_when_they_pass(
    cluster: DevCluster, crds: None, tools: Toolchain, helm4: Helm, solo_namespace: str, tmp_path: Path
) -> None:
    ns = solo_namespace
    cluster.kubectl("delete", "rollouts.helm-operator.io", TINY, "--ignore-not-found")
    res = Resources(cluster, ns)

    def watches(name: str, chart: Path) -> Path:
        # What Helm gives an upgrade and a `helm test` (the passing test Job must finish within it):
        # room for a loaded machine, not a product number; no failure here waits for it to run out.
        timeout = f"{ceil(within(30))}s"
        watch = {**TINY_WATCH, "chart": str(chart), "timeout": timeout, "maxConcurrentReconciles": 2}
        watch["rollout"] = {"waves": [{"name": "first", "percent": 50}, {"name": "second", "percent": 100}]}
        watch["rollout"]["test"] = True
        (tmp_path / name).write_text(yaml.safe_dump([watch]))
        return tmp_path / name

    def with_test(version: str, test: str) -> Path:
        chart = chart_version(tmp_path, version)
        (chart / "templates/check.yaml").write_text(test)
        return chart

    (tmp_path / "op").mkdir()
    op = OperatorProcess(
        cluster, tools.helm, tmp_path / "op", watches("w1.yaml", chart_version(tmp_path, "0.1.0")), [ns]
    )
    op.start()
    try:
        names = [f"gate-{i}" for i in range(4)]
        for n in names:
            res.apply(tiny(n))
        eventually(lambda: len(charts(helm4, ns)) == 4, timeout=120, what="4 releases of 0.1.0")
        eventually(
            lambda: (
                (r := rollout(cluster)).get("status", {}).get("updated") == "4/4"
                and r["status"]["phase"] == "Complete"
            ),
            timeout=120,
            what="v1",
        )
        op.stop()

        op.watches = watches("w2.yaml", with_test("0.2.0", TEST_FAILING_JOB))
        op.start()
        halted = eventually(
            lambda: (r := rollout(cluster)).get("status", {}).get("phase") == "Halted" and r,
            timeout=180,
            what="halted by failing tests",
        )
        assert halted["status"]["wave"] == "first" and len(halted["status"]["failures"]) >= 1, halted[
            "status"
        ]
        first = {f["resource"].split("/")[1] for f in halted["status"]["failures"]}
        assert all("TestFailed" in f["message"] for f in halted["status"]["failures"]), halted["status"]
        eventually(
            lambda: set(charts(helm4, ns).values()) == {"tiny-0.1.0"},
            timeout=60,
            what="every release on 0.1.0",
        )
        some = sorted(first)[0]
        res.wait_event(some, "TestFailed")
        # A revision that failed its tests went back to the one before it (revision 1), never to
        # itself (a rollback to the failed revision deploys the failed change again).
        for n in first:
            backs = [c.split()[2] for c in op.helm_calls() if c.startswith(f"rollback {n} ")]
            assert backs and "2" not in backs, (n, backs)
        op.stop()

        tests_before = sum(c.startswith("test gate-") for c in op.helm_calls())
        op.watches = watches("w3.yaml", with_test("0.3.0", TEST_JOB))
        op.start()
        eventually(
            lambda: rollout(cluster).get("status", {}).get("phase") == "Complete",
            timeout=180,
            what="tests pass",
        )
        assert set(charts(helm4, ns).values()) == {"tiny-0.3.0"}, charts(helm4, ns)
        for n in names:  # the TEST action, chosen because the new revision had not passed its tests
            res.wait_event(n, "TestSucceeded")
        resynced = op.resyncs()  # a resync of a tested release tests nothing again
        eventually(lambda: op.resyncs() >= resynced + len(names), timeout=within(60), what="a resync of each")
        tests = [c for c in op.helm_calls() if c.startswith("test gate-")]
        assert len(tests) - tests_before == len(names), tests
    finally:
        op.stop()
        cluster.kubectl("delete", "rollouts.helm-operator.io", TINY, "--ignore-not-found", check=False)
