"""The capacity model gives back its own measured inputs at N = 1000 and scales as its formulas say."""

from __future__ import annotations

import dataclasses
import math

import pytest

from bench import capacity
from bench.capacity import Limits, Line, fit, load, md_table, plan

MEASURED = load()  # the committed results: bench/results/*.json and *.md
LIMITS = Limits()


def _measured_at(n: int, points: tuple[tuple[int, float], ...]) -> float:
    return dict(points)[n]


def test_it_reads_the_committed_benchmark_at_each_measured_n() -> None:
    assert [n for n, _ in MEASURED.rss_points] == [100, 500, 1000]
    assert "n1000.json" in MEASURED.sources["main runs"]
    assert MEASURED.concurrency == 8
    assert MEASURED.update.helm_calls == pytest.approx(1.0)
    assert MEASURED.cached_per_resource == pytest.approx(3.0)  # sharding.md: 900 for 300
    assert MEASURED.history_max == 5 and MEASURED.reconcile_period_s == 60.0  # Watch's defaults


def test_at_the_measured_n_it_gives_back_what_was_measured() -> None:
    p = plan(1000, MEASURED, LIMITS)
    assert p.replicas == 1
    assert p.update.seconds == pytest.approx(MEASURED.update.seconds, rel=0.01)
    assert p.install.seconds == pytest.approx(MEASURED.install.seconds, rel=0.01)
    assert p.rss_mib == pytest.approx(_measured_at(1000, MEASURED.rss_points), rel=0.03)
    assert p.restart_s == pytest.approx(_measured_at(1000, MEASURED.restart_points), rel=0.05)
    assert p.idle_rps == pytest.approx(_measured_at(1000, MEASURED.idle_rps_points), rel=0.10)
    assert p.idle_cpu_cores == pytest.approx(_measured_at(1000, MEASURED.idle_cpu_points), rel=0.10)
    # the operator's and helm's CPU per upgrade: the wave's CPU over N, as the benchmark counted it
    assert MEASURED.update.operator_cpu * 1000 == pytest.approx(28.26, abs=0.01)
    assert MEASURED.update.cpu * 1000 == pytest.approx(147.28, abs=0.01)


def test_replicas_are_the_ceiling_of_n_over_what_one_replica_holds() -> None:
    cap = capacity.per_replica_max(MEASURED, LIMITS)
    assert plan(cap, MEASURED, LIMITS).replicas == 1
    assert plan(cap + 1, MEASURED, LIMITS).replicas == 2
    assert plan(10 * cap, MEASURED, LIMITS).replicas == 10
    assert plan(10 * cap + 1, MEASURED, LIMITS).replicas == 11
    # what one replica holds fits its memory, with the start-up reserve kept free
    full = plan(cap, MEASURED, LIMITS)
    assert full.rss_mib + MEASURED.start_peak_mib <= LIMITS.rss_limit_mib
    assert MEASURED.rss_mib.at(cap + 1) + MEASURED.start_peak_mib > LIMITS.rss_limit_mib


def test_a_bigger_memory_limit_means_fewer_replicas() -> None:
    small, big = plan(100_000, MEASURED, LIMITS), plan(100_000, MEASURED, Limits(rss_limit_mib=1024))
    assert big.replicas < small.replicas


def test_doubling_n_doubles_the_per_resource_part_of_idle_requests() -> None:
    a, b = plan(20_000, MEASURED, LIMITS), plan(40_000, MEASURED, LIMITS)
    per_replica = MEASURED.idle_rps.intercept
    assert b.idle_rps - b.replicas * per_replica == pytest.approx(2 * (a.idle_rps - a.replicas * per_replica))
    assert b.resyncs_per_s == pytest.approx(2 * a.resyncs_per_s)


def test_storage_grows_with_n_and_with_the_history_kept() -> None:
    a, b = plan(10_000, MEASURED, LIMITS), plan(20_000, MEASURED, LIMITS)
    assert b.etcd_bytes == 2 * a.etcd_bytes
    assert b.release_secrets == 2 * a.release_secrets == 20_000 * 5
    one = plan(10_000, MEASURED, Limits(history_max=1))
    assert one.secret_bytes * 5 == a.secret_bytes


def test_a_wave_runs_at_the_replicas_pace_until_their_writes_fill_the_api_budget() -> None:
    rate, _ = capacity.replica_rate(MEASURED, LIMITS)
    small = plan(5_000, MEASURED, LIMITS)
    assert small.update.bound.startswith("operator")
    assert small.update.seconds == pytest.approx(math.ceil(5_000) / (small.replicas * rate))
    big = plan(100_000, MEASURED, LIMITS)
    assert big.update.bound == "API server write budget"
    assert big.update.seconds == pytest.approx(100_000 * LIMITS.writes_per_change / LIMITS.api_write_rps)
    # a budget twice as large halves an API-bound wave
    wider = plan(100_000, MEASURED, dataclasses.replace(LIMITS, api_write_rps=2 * LIMITS.api_write_rps))
    assert wider.update.seconds == pytest.approx(big.update.seconds / 2)


def test_a_cpu_limit_below_what_helm_needs_sets_the_pace() -> None:
    rate, bound = capacity.replica_rate(MEASURED, Limits(cpu_limit=0.25))
    assert bound == "CPU limit"
    assert rate == pytest.approx(0.25 / MEASURED.update.cpu)


def test_the_api_limit_is_where_the_fleet_of_replicas_fills_the_write_budget() -> None:
    limit = capacity.api_limit(MEASURED, LIMITS)
    before, at = plan(limit.wave_n - 1, MEASURED, LIMITS), plan(limit.wave_n, MEASURED, LIMITS)
    assert before.update.bound.startswith("operator")
    assert at.update.bound == "API server write budget"
    per_resource = 5 * capacity.RELEASE_DATA_BYTES + capacity.MANIFEST_BYTES
    assert limit.etcd_n == capacity.ETCD_DEFAULT_QUOTA // per_resource
    assert limit.cluster_wide() == sorted(limit.cluster_wide())


def test_an_rss_limit_below_the_fixed_part_is_refused_with_the_numbers() -> None:
    # At the measured fixed part (the interpreter, no resources, no start-up reserve): whatever it measures.
    with pytest.raises(ValueError, match="leaves no room"):
        plan(1000, MEASURED, Limits(rss_limit_mib=MEASURED.rss_mib.intercept))


def test_fit_is_least_squares_and_never_slopes_down() -> None:
    assert fit([(0, 1.0), (10, 3.0)]) == Line(1.0, 0.2)
    assert fit([(0, 1.0), (1, 2.0), (2, 3.0)]).at(4) == pytest.approx(5.0)
    assert fit([(0, 2.0), (10, 1.0)]).slope == 0.0


def test_md_table_repeats_blank_cells_from_the_row_above() -> None:
    text = "intro\n\n| k | N | instance |\n|---|---|---|\n| 2 | 300 | s0 |\n| | | s1 |\n\nafter\n"
    assert md_table(text, "k") == [
        {"k": "2", "N": "300", "instance": "s0"},
        {"k": "2", "N": "300", "instance": "s1"},
    ]
    with pytest.raises(ValueError, match="no table"):
        md_table(text, "missing")


def test_the_report_states_its_assumptions_and_what_it_does_not_know() -> None:
    text = capacity.render(MEASURED, LIMITS)
    for n in ("10,000", "50,000", "100,000"):
        assert f"## N = {n}" in text
    assert "## N = 1,000 (measured: the model's check)" in text
    assert "extrapolated from one 2-core machine" in text
    assert "estimated, not measured" in text
    assert "etcd.io" in text and "thresholds.md" in text


def test_the_committed_report_is_what_the_module_writes() -> None:
    expected = capacity.render(MEASURED, LIMITS, command="python -m bench.capacity --write")
    assert capacity.OUT.read_text() == expected, "stale: run python -m bench.capacity --write"
