"""The benchmark's pure parts: statistics, /proc and metrics parsing, release bookkeeping, targets
and the rendered report. No cluster, no processes."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest

from bench import helm_calls, merge, report, runtime_env, stats, workload
from bench.contenders import reconciled_releases
from bench.measure import (
    ProcStat,
    grown,
    helm_subcommands,
    parse_counter,
    parse_request_total,
    parse_requests,
    parse_stat,
    parse_status_kib,
    process_tree,
)
from bench.ring import report as ring_report
from bench.ring import twice_or_lost
from bench.sdk import go_directive, kubernetes_version, replace_lines
from bench.sharding import per_instance

# -- statistics -----------------------------------------------------------------------------


def test_percentile_interpolates_between_ranks() -> None:
    assert stats.percentile([1, 2, 3, 4], 50) == 2.5
    assert stats.percentile([5], 95) == 5
    assert stats.percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 95) == pytest.approx(9.55)
    assert stats.percentile([3, 1, 2], 0) == 1 and stats.percentile([3, 1, 2], 100) == 3


def test_percentile_keeps_timeouts_infinite() -> None:
    values = [0.1, 0.2, math.inf, math.inf]
    assert stats.percentile(values, 50) == math.inf  # half of the changes were never corrected
    assert stats.percentile([0.1, 0.2, 0.3, math.inf], 25) == pytest.approx(0.175)
    assert stats.percentile([math.inf, math.inf], 50) == math.inf


def test_percentile_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        stats.percentile([], 50)
    with pytest.raises(ValueError):
        stats.percentile([1], 101)


def test_summary_median_ratio_rate_growth() -> None:
    s = stats.summarise([1.0, 2.0, 3.0])
    assert s == {"n": 3, "p50": 2.0, "p95": pytest.approx(2.9), "max": 3.0, "mean": 2.0}
    assert stats.summarise([]) is None
    assert stats.median([None, 3.0, 1.0]) == 2.0 and stats.median([None]) is None
    assert stats.ratio(3.0, 2.0) == 1.5
    assert stats.ratio(None, 2.0) is None and stats.ratio(1.0, 0.0) is None
    assert stats.rate_per_minute(120, 60, per=10) == 12.0
    assert stats.rate_per_minute(1, 0) is None
    assert stats.growth(10, 12) == 1.2
    assert stats.growth(0, 0) is None and stats.growth(0, 3) == math.inf


def test_poll_interval_scales_with_n() -> None:
    from bench.scenarios import poll_interval

    assert poll_interval(20) == 0.25 and poll_interval(500) == 0.5 and poll_interval(5000) == 1.0


# -- parsers ----------------------------------------------------------------------------------


def test_parse_stat_counts_fields_after_the_command_name() -> None:
    # A command name with spaces and a parenthesis must not shift the fields.
    text = "4242 (python (x) y) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 40 7 3 20 0 5 0 100 0 0"
    st = parse_stat(text)
    assert (st.pid, st.ppid, st.utime, st.stime, st.cutime, st.cstime) == (4242, 17, 250, 40, 7, 3)
    assert st.comm == "python (x) y"


def test_process_tree_walks_descendants_only() -> None:
    def st(pid: int, ppid: int, comm: str) -> ProcStat:
        return ProcStat(pid, ppid, 1, 1, 0, 0, comm)

    stats = [st(1, 0, "init"), st(10, 1, "python"), st(11, 10, "helm"), st(12, 11, "helm"), st(20, 1, "helm")]
    assert [p.pid for p in process_tree(10, stats)] == [10, 11, 12]
    assert process_tree(99, stats) == []


def test_parse_status_kib() -> None:
    text = "Name:\tpython\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n"
    assert parse_status_kib(text, "VmRSS") == 102400
    assert parse_status_kib(text, "VmHWM") == 204800
    assert parse_status_kib(text, "VmSwap") is None


def test_parse_request_total_sums_resource_requests_only() -> None:
    text = "\n".join(
        [
            "# HELP apiserver_request_total Counter of apiserver requests",
            'apiserver_request_total{code="200",component="apiserver",group="",resource="secrets",'
            'scope="namespace",subresource="",verb="LIST",version="v1"} 12',
            'apiserver_request_total{code="201",component="apiserver",group="apps",resource="deployments",'
            'scope="resource",subresource="",verb="POST",version="v1"} 3',
            'apiserver_request_total{code="200",component="",group="",resource="",scope="",subresource="/metrics",'
            'verb="GET",version=""} 40',
            'apiserver_request_duration_seconds_count{resource="secrets",verb="LIST"} 99',
        ]
    )
    assert parse_request_total(text) == 15
    assert parse_request_total(text, resource_only=False) == 55
    assert parse_requests(text) == {"LIST secrets": 12, "POST deployments": 3}
    later = parse_requests(text.replace("} 12", "} 20"))
    assert grown(parse_requests(text), parse_requests(text), later) == {"LIST secrets": [0, 8]}


def test_parse_counter() -> None:
    text = "\n".join(
        [
            "# TYPE controller_runtime_reconcile_total counter",
            'controller_runtime_reconcile_total{controller="podinfo-controller",result="success"} 7',
            'controller_runtime_reconcile_total{controller="podinfo-controller",result="requeue_after"} 5',
            'controller_runtime_reconcile_total_extra{controller="x"} 100',
            'controller_runtime_reconcile_errors_total{controller="podinfo-controller"} 1',
        ]
    )
    assert parse_counter(text, "controller_runtime_reconcile_total") == 12
    assert parse_counter(text, "missing_total") is None


def test_helm_subcommands() -> None:
    calls = [
        "version --template {{ .Version }}",
        "upgrade a chart --install",
        "upgrade b chart",
        "--debug get x",
    ]
    assert helm_subcommands(calls) == {"get": 1, "upgrade": 2, "version": 1}


def test_sdk_log_parsing_finds_reconciled_releases() -> None:
    log = "\n".join(
        [
            '{"level":"info","msg":"Starting workers","controller":"podinfo-controller"}',
            '{"level":"info","msg":"Reconciled release","name":"a","release":"a"}',
            '{"level":"info","msg":"Installed release","name":"b","release":"b"}',
            '{"level":"error","msg":"Failed to reconcile release","release":"c"}',
            "not json at all",
        ]
    )
    assert reconciled_releases(log) == {"a", "b"}


def test_sdk_gomod_helpers() -> None:
    gomod = "\n".join(
        [
            "module github.com/operator-framework/operator-sdk",
            "",
            "go 1.26.3",
            "",
            "require (",
            "\tk8s.io/client-go v0.33.9",
            ")",
            "replace github.com/a/b => github.com/a/b v1.2.3 // pinned",
            "replace (",
            "\tgithub.com/c/d v0.1.0 => github.com/e/d v0.1.1",
            "\tgithub.com/local/x => ./hack/x",
            ")",
        ]
    )
    assert replace_lines(gomod) == [
        "github.com/a/b => github.com/a/b v1.2.3",
        "github.com/c/d v0.1.0 => github.com/e/d v0.1.1",
    ]
    assert go_directive(gomod) == "1.26.3"
    assert kubernetes_version(gomod) == "v1.33.9"


# -- workload ---------------------------------------------------------------------------------


def secret(name: str, version: int, status: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"owner": "helm", "name": name, "version": str(version), "status": status}}
    }


def test_release_records_and_what_is_deployed() -> None:
    items = [
        secret("a", 1, "superseded"),
        secret("a", 2, "deployed"),
        secret("b", 1, "deployed"),
        secret("c", 1, "pending-install"),
        {"metadata": {"labels": {"owner": "someone-else", "name": "d"}}},
    ]
    records = workload.records_from_metadata(items)
    assert workload.deployed_at_least(records, 1) == {"a", "b"}
    assert workload.deployed_at_least(records, 2) == {"a"}
    assert workload.latest_revision(records) == {"a": 2, "b": 1, "c": 1}
    pruned = workload.records_from_metadata([secret("a", 2, "deployed")])  # the SDK keeps only this one
    assert workload.latest_revision(pruned) == {"a": 2}


def test_success_as_each_operator_reports_it() -> None:
    released = {"type": "Released", "status": "True", "observedGeneration": 1}
    ready = {"type": "Ready", "status": "False", "reason": "WorkloadsNotReady", "observedGeneration": 2}
    ours: dict[str, Any] = {"metadata": {"generation": 2}, "status": {"conditions": [released, ready]}}
    assert not workload.ours_reports_success(ours)  # released, but for the previous spec
    released["observedGeneration"] = 2
    assert workload.ours_reports_success(ours)  # what the SDK's Deployed=True says
    assert not workload.ours_reports_ready(ours)  # its Pods are still rolling out
    ready["status"] = "True"
    assert workload.ours_reports_ready(ours)
    sdk = {
        "status": {
            "conditions": [{"type": "Deployed", "status": "True", "reason": "UpgradeSuccessful"}],
            "deployedRelease": {"name": "x", "manifest": f"data:\n  M: {workload.marker(1)}\n"},
        }
    }
    assert workload.sdk_reports_success(sdk, 1)
    assert not workload.sdk_reports_success(sdk, 2)


def test_names_values_and_crd_are_per_contender() -> None:
    assert workload.release_names(3) == ["podinfo-0000", "podinfo-0001", "podinfo-0002"]
    assert workload.values(2)["ui"]["message"] == workload.marker(2) != workload.marker(1)
    crd = workload.crd("sdk")
    assert crd["metadata"]["name"] == "podinfos.sdk.bench.example.com"
    assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}
    assert workload.custom_resource("ours", "x", 1)["apiVersion"] == "ours.bench.example.com/v1"


# -- the report -------------------------------------------------------------------------------


def wave(seconds: float, per_release: float | None = 1.0, revisions: int = 1, off: int = 0) -> dict[str, Any]:
    return {
        "seconds": seconds,
        "deployed_s": seconds,
        "cpu_s": 2.0,
        "helm_calls_per_release": per_release,
        "helm_subcommands": {"upgrade": 4} if per_release else None,
        "revisions_min": revisions,
        "revisions_max": revisions,
        "releases_with_other_revision_count": off,
        "helm_parallel_mean": 6.5 if per_release else None,
        "helm_parallel_max": 8 if per_release else None,
        "timeline": [[0.0, 0], [seconds, 4]],
    }


def idle(cpu: float | None, first: float, second: float, calls: int | None = 0) -> dict[str, Any]:
    return {
        "seconds": 60.0,
        "cpu_pct": cpu,
        "cpu_pct_first_half": cpu,
        "cpu_pct_second_half": cpu,
        "helm_calls": calls,
        "requests_first_half": first,
        "requests_second_half": second,
        "samples": [[5.0, cpu, 50.0]],
    }


def run(contender: str, n: int, rep: int, conv: float, upd: float, **extra: Any) -> dict[str, Any]:
    operator = contender != "helm"
    r: dict[str, Any] = {
        "contender": contender,
        "n": n,
        "rep": rep,
        "convergence": wave(conv, 1.0 if contender != "sdk" else None),
        "update": wave(upd, 1.0 if contender != "sdk" else None, revisions=2),
    }
    if rep == 0:
        r["idle"] = idle(0.5 if operator else None, 100, 100, 0 if contender != "sdk" else None)
        r["drift"] = None
        r["footprint"] = {"rss_peak_mib": 150.0, "rss_steady_mib": 120.0} if operator else None
        r["restart"] = (
            {"seconds": 3.0, "helm_calls": 0 if contender == "ours" else None} if operator else None
        )
    r.update(extra)
    return r


def results() -> dict[str, Any]:
    latencies = [0.1, 0.2, 0.3, 0.4, 0.5, 0.2, 0.3, 0.1, 0.2, None]
    drift: dict[str, Any] = {
        "timeout_s": 60,
        "changes": [
            {"kind": workload.DRIFT_KINDS[i % 3], "release": f"podinfo-{i:04d}", "latency_s": x}
            for i, x in enumerate(latencies)
        ],
    }
    return {
        "mode": "full",
        "command": "python -m bench",
        "started": "2026-01-01 00:00 UTC",
        "wall_seconds": 1234.0,
        "config": {"concurrency": 8, "repetitions": 2},
        "machine": {
            "nproc": 2,
            "cpu_model": "Test CPU",
            "memory_gib": 24.0,
            "load_average_start": [0.5, 0.4, 0.3],
        },
        "versions": {"helm": "v4.3.1"},
        "commands": {"ours": "`python -m helm_operator.cli run ...`"},
        "runs": [
            run("ours", 1000, 0, 11.0, 12.0, drift=drift),
            run("ours", 1000, 1, 13.0, 12.0),
            run("helm", 1000, 0, 10.0, 11.0),
            run("helm", 1000, 1, 10.0, 11.0),
            run(
                "sdk",
                1000,
                0,
                30.0,
                40.0,
                drift={
                    **drift,
                    "changes": drift["changes"][:3],
                    "skipped": 7,
                    "stopped": "the 600 s budget was spent",
                },
            ),
            run("sdk", 1000, 1, 32.0, 44.0),
        ],
    }


def verdicts(res: dict[str, Any]) -> dict[str, report.Verdict]:
    return {v.target: v for v in report.targets(res)}


def test_medians_and_ratios_across_repetitions() -> None:
    res = results()
    assert report.wave_median(res, "ours", 1000, "convergence", "seconds") == 12.0
    v = verdicts(res)
    conv = v["Convergence within 1.15x the floor at every N"]
    assert (conv.measured, conv.verdict, conv.margin) == ("1.20x (worst: N=1000)", "missed", "0.05x over")
    peer = v["Convergence faster than the SDK at every N"]
    assert peer.verdict == "met" and peer.measured.startswith("0.39x")
    upd = v["Update wave within 1.15x the floor at every N"]
    assert upd.verdict == "met" and upd.measured.startswith("1.09x")


def test_helm_call_targets() -> None:
    res = results()
    v = verdicts(res)
    install = "Exactly one helm process per install (the breakdown below lists any other)"
    assert v[install].verdict == "met"
    assert v["Zero helm processes while idle (resyncs)"].verdict == "met"
    assert v["Zero helm processes on a restart with unchanged CRs"].verdict == "met"
    n = res["runs"][1]["n"]
    res["runs"][1]["convergence"]["helm_subcommands"] = {"upgrade": n, "version": 1}  # once per process
    assert verdicts(res)[install].verdict == "met"
    res["runs"][1]["convergence"]["helm_subcommands"] = {"upgrade": n + 8}  # some installs ran twice
    res["runs"][0]["restart"]["helm_calls"] = 3
    v = verdicts(res)
    assert v[install].verdict == "missed"
    assert v[install].measured.startswith("1.01")
    assert v["Zero helm processes on a restart with unchanged CRs"].measured == "3 (worst: N=1000)"


def test_drift_targets_count_timeouts_as_never() -> None:
    v = verdicts(results())
    p50 = v["Drift correction p50 ≤ 0.5 s"]
    assert p50.verdict == "met" and p50.measured == "0.25 s"  # 9 corrected + one timeout
    p95 = v["Drift correction p95 ≤ 2 s"]
    assert p95.verdict == "missed" and p95.margin == "never reached"


def test_targets_below_the_stated_n_say_so() -> None:
    res = copy.deepcopy(results())
    for r in res["runs"]:
        r["n"] = 20
    rss = verdicts(res)["Peak RSS ≤ 200 MiB"]
    assert rss.measured == "150 MiB (at N=20; the target is for N=1000)"
    assert rss.verdict == "met" and rss.margin == "50 MiB headroom"


def test_missing_contenders_are_not_measured() -> None:
    res = results()
    res["runs"] = [r for r in res["runs"] if r["contender"] == "ours"]
    v = verdicts(res)
    assert v["Convergence faster than the SDK at every N"].verdict == "not measured"
    assert v["Convergence within 1.15x the floor at every N"].measured == "n/a"


def test_idle_request_rate_is_net_of_the_floor() -> None:
    res = results()
    res["runs"][0]["idle"]["requests_first_half"] = 400
    res["runs"][0]["idle"]["requests_second_half"] = 500
    rate = report.idle_request_rate(res, "ours", 1000)
    # 900 requests in a minute for 1000 CRs; the floor's background was 200 in the same window.
    assert rate["raw"] == pytest.approx(0.9)
    assert rate["net"] == pytest.approx(0.7)
    assert rate["growth"] == pytest.approx(1.25)
    assert verdicts(res)["Idle API request rate not growing (2nd half ≤ 1.2x 1st half)"].verdict == "missed"


def test_render_is_deterministic_and_complete() -> None:
    res = results()
    text = report.render(res, {"CPU while idle": "plots/idle-cpu.png"})
    assert text == report.render(copy.deepcopy(res), {"CPU while idle": "plots/idle-cpu.png"})
    for heading in ("## Targets", "## Convergence", "## Update wave", "## Drift correction", "## Idle"):
        assert heading in text
    assert "```\npython -m bench\n```" in text
    assert "| 1000 | ours | 12.00 (n=2) | 1.20x | 0.39x |" in text
    assert "| 1000 | helm (floor) | all | n/a (no drift correction) |" in text
    assert "1 not corrected within 60 s" in text
    assert "7 more not made (the 600 s budget was spent)" in text
    assert "![CPU while idle](plots/idle-cpu.png)" in text
    assert "| CPU model | Test CPU |" in text
    assert "`upgrade` 4" in text
    assert "machine was busy" not in text
    assert "## Reading of this run" not in text
    res["analysis"] = "The SDK converges faster at N=1000: ...\n"
    reading = "## Reading of this run: what was missed or not measured, and why\n\nThe SDK converges faster"
    assert reading in report.render(res)
    assert report.render(res).index(reading) < report.render(res).index("## Convergence")
    res["machine"]["load_average_start"] = [5.0, 4.0, 3.0]
    assert "**The machine was busy** when the run started (load average 5.0 on 2 CPUs)" in report.render(res)
    assert "| 1.00 | 6.5 / 8 | 1 |" in text  # helm processes per release, in parallel, revision


def _run_of(n: int) -> dict[str, Any]:
    """What ``python -m bench --n N`` writes: ``results()`` cut down to one N."""
    res = copy.deepcopy(results())
    res["config"]["ns"] = [n]
    res["command"] = f"python -m bench --n {n} --repetitions 2"
    for r in res["runs"]:
        r["n"] = n
    return res


def test_runs_of_different_n_merge_into_one_report_with_each_command() -> None:
    parts = [_run_of(100), _run_of(500), _run_of(1000)]
    parts[1]["error"] = "ContenderFailed: sdk at N=500: wave 2 not converged in 1800s"
    parts[2]["background"] = {"requests_first_half": 10, "requests_second_half": 10, "seconds": 60}
    merged = merge.merge(parts, [100, 500, 1000])
    assert merged["mode"] == "full" and merged["config"]["ns"] == [100, 500, 1000]
    assert len(merged["runs"]) == 3 * len(results()["runs"])
    assert merged["wall_seconds"] == 3 * 1234.0
    assert merged["background"] == {"requests_first_half": 10, "requests_second_half": 10, "seconds": 60}
    assert merged["error"] == "run 2: ContenderFailed: sdk at N=500: wave 2 not converged in 1800s"
    text = report.render(merged)
    assert "```\npython -m bench --n 100 --repetitions 2\npython -m bench --n 500 --repetitions 2\n" in text
    assert "| 500 | 2026-01-01 00:00 UTC | 1234 | 0.5 / 0.4 / 0.3 |" in text
    assert "Full mode, made in 3 runs" in text
    assert "| 100 | ours |" in text and "| 1000 | ours |" in text
    assert merge.merge([parts[0]], [100, 500, 1000]) is parts[0]  # one run: as it was


def test_a_run_that_stopped_early_is_completed_by_a_run_of_what_it_missed() -> None:
    first, rest = _run_of(500), _run_of(500)
    first["config"]["contenders"] = ["ours", "helm", "sdk"]
    first["runs"] = [r for r in first["runs"] if r["contender"] == "ours"]
    first["versions"]["helm-operator"] = "0.1.0 (commit 9d07b72)"  # only a run of ours has it
    first["error"] = "TimeoutError: namespace bench-helm-500-r0-0629 still terminating after 600s"
    rest["config"]["contenders"] = ["helm", "sdk"]
    rest["runs"] = [r for r in rest["runs"] if r["contender"] != "ours"]
    merged = merge.merge([first, rest], [100, 500, 1000])
    assert merged["config"]["contenders"] == ["ours", "helm", "sdk"]
    assert merged["split"] == ["N=500: ours in run 1; helm, sdk in run 2"]
    text = report.render(merged)
    assert "- N=500: ours in run 1; helm, sdk in run 2" in text
    assert "**A run stopped early:** `run 1: TimeoutError: namespace bench-helm-500-r0-0629" in text
    assert "The run failed" not in text
    assert "| 500 | 2026-01-01 00:00 UTC | 1234 | 0.5 / 0.4 / 0.3 |  | helm, sdk |" in text
    rest["runs"] = [r for r in rest["runs"] if r["rep"] == 0]  # the SDK's 2nd repetition is missing
    assert "**The run failed:** `run 1: TimeoutError" in report.render(merge.merge([first, rest], [500]))
    rest["versions"]["helm"] = "v3.19.0"
    with pytest.raises(merge.MergeError, match=r"versions.helm: 'v3.19.0' vs 'v4.3.1'"):
        merge.merge([first, rest], [500])


def test_runs_that_measured_different_things_are_not_merged() -> None:
    one, other = _run_of(100), _run_of(1000)
    one["versions"]["helm-operator"] = "0.1.0 (commit 9d07b72)"
    other["versions"]["helm-operator"] = "0.1.0 (commit abc1234)"
    with pytest.raises(merge.MergeError, match=r"versions.helm-operator"):
        merge.merge([one, other], [100, 500, 1000])
    other = _run_of(1000)
    other["config"]["concurrency"] = 4
    with pytest.raises(merge.MergeError, match=r"config.concurrency: 4 vs 8"):
        merge.merge([_run_of(100), other], [100, 500, 1000])
    with pytest.raises(merge.MergeError, match=r"ours at N=100 \(repetition 1\) is in runs 1 and 2"):
        merge.merge([_run_of(100), _run_of(100)], [100, 500, 1000])


def test_render_marks_a_failed_run() -> None:
    res = results()
    res["error"] = "ContenderFailed: sdk at N=20: wave 1 not converged in 300s\nlog..."
    assert (
        "**The run failed:** `ContenderFailed: sdk at N=20: wave 1 not converged in 300s`"
        in report.render(res)
    )


def test_a_profile_is_summed_by_package_and_by_our_functions(tmp_path: Path) -> None:
    from bench import profile

    raw = tmp_path / "ours-1.txt"
    raw.write_text(
        "run (kopf/_core/reactor/running.py:10);_change (helm_operator/runtime/handlers.py:180);"
        "get (kubernetes/dynamic/client.py:112);recv_into (ssl.py:1307) 6\n"
        "run (kopf/_core/reactor/running.py:10);_change (helm_operator/runtime/handlers.py:181);"
        "check_release (helm_operator/drift/check.py:150) 3\n"
        "_run_once (asyncio/base_events.py:1900) 1\n"
        "run (kopf/_core/reactor/running.py:10);_change (helm_operator/runtime/handlers.py:182);"
        "send (ssl.py:1200) 4\n"
    )
    summary = profile.summarize([raw])
    assert summary["samples"] == 8 and summary["cpu_seconds"] == 8 / profile.RATE
    assert summary["waiting_samples"] == 6  # blocked in a socket read: not running
    assert dict(summary["by_package"]) == {
        "HTTP (urllib3, ssl, socket)": 4,
        "helm-operator (ours)": 3,
        "asyncio": 1,
    }
    ours = dict(summary["ours_inclusive"])
    assert ours["_change (helm_operator/runtime/handlers.py)"] == 7  # both lines of it, counted once
    assert ours["check_release (helm_operator/drift/check.py)"] == 3
    text = "\n".join(profile.render(summary))
    assert "| HTTP (urllib3, ssl, socket) | 50.0 % |" in text


def test_merged_runs_name_each_run_s_value_of_a_machine_fact_they_differ_in() -> None:
    one, other = _run_of(100), _run_of(1000)
    one["machine"] = {"nproc": 2, "cpu_model": "AMD EPYC", "load_average_start": [0.9, 3.7, 4.5]}
    other["machine"] = {"nproc": 2, "cpu_model": "Intel Xeon", "load_average_start": [0.3, 1.3, 1.6]}
    merged = merge.merge([one, other], [100, 500, 1000])
    assert merged["machine"]["nproc"] == 2
    assert merged["machine"]["cpu_model"] == "AMD EPYC (run 1) / Intel Xeon (run 2)"
    text = report.render(merged)
    assert "| CPU model | AMD EPYC (run 1) / Intel Xeon (run 2) |" in text
    assert "| load average at start (1/5/15 min) |" not in text  # per run, in the table of runs


# -- the runtime-only environment ours runs in ---------------------------------------------------


def test_runtime_env_pins_the_runtime_closure_without_the_test_extras(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["PyYAML>=6", "deepdiff>=8"]\n')
    pins = runtime_env.closure(runtime_env.requirements(pyproject))
    assert "pyyaml" in pins and "deepdiff" in pins
    assert "orderly-set" in pins  # deepdiff's own dependency is followed
    assert "numpy" not in pins and "matplotlib" not in pins  # installed here, but only as test extras
    assert "kopf" not in pins  # only what the named packages need


def test_runtime_env_names_a_missing_dependency(tmp_path: Path) -> None:
    with pytest.raises(runtime_env.RuntimeEnvError, match="no-such-package-xyz"):
        runtime_env.closure(["No_Such.Package-xyz>=1"])


def test_pod_room_counts_ready_schedulable_nodes_less_the_pods_still_running_on_them() -> None:
    from bench.cluster import pod_room

    def node(name: str, pods: int, ready: bool = True, cordoned: bool = False) -> dict[str, Any]:
        return {
            "metadata": {"name": name},
            "spec": {"unschedulable": cordoned},
            "status": {
                "allocatable": {"pods": str(pods)},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }

    def pod(on: str | None, phase: str = "Running") -> dict[str, Any]:
        return {"spec": {"nodeName": on}, "status": {"phase": phase}}

    nodes = [node("a", 110), node("b", 110), node("down", 110, ready=False), node("c", 110, cordoned=True)]
    pods = [pod("a"), pod("a", "Succeeded"), pod("b", "Pending"), pod(None, "Pending"), pod("down")]
    assert pod_room(nodes, pods) == 220 - 2  # a's running Pod and b's bound one; the rest take no room


def test_ring_moves_count_a_release_upgraded_twice_and_a_change_lost() -> None:
    before = {"a": 2, "b": 2, "c": 2, "d": 2}
    after = {"a": 3, "b": 4, "c": 2, "d": 2, "e": 1}  # b twice; c lost; d unchanged, as it should be
    assert twice_or_lost(before, after, ["a", "b", "c"]) == (["b", "e"], ["c"])
    assert twice_or_lost(before, {**before, "a": 4}, ["a", "a"]) == ([], [])  # two changes, two revisions


def test_shard_tables_give_a_run_s_cells_once_and_each_instance_its_share() -> None:
    settled = {"s0": ((104.0, 120.0), 2.0, 42.0), "s1": ((106.0, 121.0), 2.5, 48.0)}
    one = per_instance({"s0": ((110.0, 130.0), 4.0, 90.0)}, {"s0": 6.0}, {"s0": 30})
    two = per_instance(settled, {"s0": 3.0, "s1": 3.5}, {"s0": 14, "s1": 16})
    assert [i["share"] for i in two] == [14, 16] and two[1]["cpu_s"] == 3.5 and two[1]["cpu_install_s"] == 2.5
    assert "share" not in per_instance(settled, {"s0": 3.0, "s1": 3.5})[0]  # static shards: by label
    runs = [
        {
            "k": k,
            "n": 30,
            "converge_s": 9.0,
            "wave_s": 11.0,
            "idle_requests_per_resource_min": 0.9,
            "instances": i,
        }
        for k, i in ((1, one), (2, two))
    ]
    text = ring_report(runs, "m", background=100, settle=75)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "instance" not in line]
    assert rows[1] == "| 2 | 30 | 9.0 | 11.0 | 0.90 | s0 | 14 | 104.0 | 120.0 | 3.0 | 42 |"
    assert rows[2] == "| | | | | | s1 | 16 | 106.0 | 121.0 | 3.5 | 48 |"
    # 42/90 and 48/90 of one instance's cache, 3 objects per resource served either way.
    assert "cached objects 0.47 to 0.53 of one instance's" in text and "3.00 to 3.00 per resource" in text


def test_helm_calls_summary_gives_medians_and_the_difference_to_plain_helm_per_call() -> None:
    tally = helm_calls.Tally()
    for cpu in (0.100, 0.300, 0.200):
        tally.add(helm_calls.LEAN, 1, helm_calls.Sample(cpu))
    for cpu, caller in ((0.250, 0.010), (0.210, 0.030), (0.230, 0.020)):
        tally.add(helm_calls.OURS, 1, helm_calls.Sample(cpu, caller))
    tally.add(helm_calls.LEAN, 2, helm_calls.Sample(0.400))
    tally.add(helm_calls.BARE, 2, helm_calls.Sample(0.500, 0.005))

    rows = helm_calls.summary(tally)

    assert [(r["wave"], r["shape"]) for r in rows] == [
        ("install", "helm-lean"),
        ("install", "ours"),
        ("upgrade", "helm-lean"),
        ("upgrade", "ours, no post-renderer"),
    ]
    lean, ours = rows[0], rows[1]
    assert lean["helm_ms"] == pytest.approx(200.0) and lean["caller_ms"] is None
    assert ours["n"] == 3 and ours["helm_ms"] == pytest.approx(230.0)
    assert ours["extra_ms"] == pytest.approx(30.0) and ours["ratio"] == pytest.approx(1.15)
    assert ours["caller_ms"] == pytest.approx(20.0)
    assert rows[3]["ratio"] == pytest.approx(1.25)
    text = helm_calls.report(rows, "2 cores", "v4.3.1", 3)
    assert "| install | ours | 3 | 230.0 | +30.0 | 1.15x | 20.0 |" in text
    assert "| install | helm-lean | 3 | 200.0 | +0.0 | 1.00x | — |" in text
