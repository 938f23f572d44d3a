"""The conversion bench's pure helpers: metrics parsing, histogram quantiles, the report."""

from __future__ import annotations

import pytest

from bench.conversion import (
    bucket_quantile,
    crd,
    delta,
    histogram,
    latency,
    parse_metrics,
    read_table,
    report,
)

SCRAPE = """\
# HELP helm_operator_conversion_seconds Time to answer one ConversionReview
# TYPE helm_operator_conversion_seconds histogram
helm_operator_conversion_seconds_bucket{le="0.0005"} 8.0
helm_operator_conversion_seconds_bucket{le="0.001"} 9.0
helm_operator_conversion_seconds_bucket{le="+Inf"} 10.0
helm_operator_conversion_seconds_count 10.0
helm_operator_conversion_seconds_sum 0.005
helm_operator_conversions_total{kind="Greeting",result="Success"} 10.0
helm_operator_conversion_seconds_created 1.7e9
process_cpu_seconds_total 3.0
"""


def test_parse_metrics_keeps_the_conversion_families_only() -> None:
    got = parse_metrics(SCRAPE)
    assert got['helm_operator_conversion_seconds_bucket{le="+Inf"}'] == 10.0
    assert got['helm_operator_conversions_total{kind="Greeting",result="Success"}'] == 10.0
    assert "process_cpu_seconds_total" not in got


def test_histogram_of_a_delta() -> None:
    before = parse_metrics(SCRAPE)
    after = {k: v * 2 for k, v in before.items()}
    h = histogram(delta(after, before))
    assert h["count"] == 10 and h["sum"] == pytest.approx(0.005) and h["mean"] == pytest.approx(0.0005)
    assert h["p50"] == pytest.approx(0.0005 * 5 / 8)
    assert h["p90"] == pytest.approx(0.001)
    assert h["p99"] == pytest.approx(0.001)  # in +Inf: the highest finite bound


def test_bucket_quantile_edges() -> None:
    assert bucket_quantile([], 0.5) is None
    assert bucket_quantile([(1.0, 0.0), (float("inf"), 0.0)], 0.5) is None
    assert bucket_quantile([(1.0, 4.0), (2.0, 4.0), (float("inf"), 4.0)], 1.0) == 1.0
    assert histogram({})["p50"] is None and histogram({})["mean"] is None


def test_latency_is_milliseconds() -> None:
    q = latency([0.001, 0.002, 0.003])
    assert q["p50"] == pytest.approx(2.0) and q["p99"] == pytest.approx(2.98)


def test_read_table_gives_the_converting_version_s_difference() -> None:
    rows = read_table("t", {"v1": [0.001] * 3, "v2": [0.004] * 3}, "v2")
    assert "| v2 | webhook | 3 | 4.00 | 4.00 | 4.00 |" in rows
    assert "| difference | v2 - v1 | | +3.00 | +3.00 | +3.00 |" in rows


def test_crd_serves_both_versions_one_stored() -> None:
    versions = crd("v2")["spec"]["versions"]
    assert [(v["name"], v["served"], v["storage"]) for v in versions] == [
        ("v1", True, False),
        ("v2", True, True),
    ]


def _result(errors: list[str]) -> dict[str, object]:
    h = histogram(parse_metrics(SCRAPE))
    none = histogram({})
    return {
        "machine": "2 cores, 23 GiB",
        "server": "v1.36.3",
        "objects": 10,
        "gets": 3,
        "create_s": 0.5,
        "load": "1.0",
        "reads_before": {"v1": [0.001] * 3, "v2": [0.004] * 3},
        "lists": {"v1": [0.01] * 3, "v2": [0.01] * 3},
        "webhook": [
            ("3 GETs as v2", h, 0.0),
            ("3 LISTs of 10 as v2", none, 0.0),
            ("migrate-storage", h, 0.0),
        ],
        "migration": {
            "objects": 10,
            "wall_s": 2.0,
            "tool_s": 1.5,
            "stored_before": ["v1", "v2"],
            "stored_after": ["v2"],
        },
        "reads_after": {"v1": [0.004] * 3, "v2": [0.001] * 3},
        "errors": errors,
    }


def test_report() -> None:
    text = report(_result([]))
    assert "| 10 | 2.0 | 1.5 | 5 | ['v1', 'v2'] | ['v2'] |" in text
    assert "| 3 GETs as v2 | 10 | 0.500 | 0.31 | 1.00 | 1.00 | 0 |" in text
    assert "| 3 LISTs of 10 as v2 | 0 | — | — | — | — | 0 |" in text
    assert "(1.0 webhook reviews per object during it)" in text
    assert "No request failed" in text
    assert "**Errors seen**\n\n- GET v2 g-00000: 500 x" in report(_result(["GET v2 g-00000: 500 x"]))
