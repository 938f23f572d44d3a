"""Prometheus metrics of the operator (served with ``helm-operator run --metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

DRIFT_CORRECTIONS = Counter(
    "helm_operator_drift_corrections_total",
    "Objects re-asserted because they drifted from the deployed release",
    ["watch", "object_kind"],
)
DRIFT_DETECTED = Counter(
    "helm_operator_drift_detected_total",
    "Drifted objects found (corrected or, in warn mode, only reported)",
    ["watch", "object_kind"],
)
DEPENDENT_CACHE = Gauge(
    "helm_operator_dependent_cache_objects",
    "Objects held in the cache of each dependent watch (label-filtered server-side)",
    ["kind"],
)
