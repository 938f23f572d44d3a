"""Prometheus metrics of the operator (served with ``helm-operator run --metrics-bind-address``).

Names follow Prometheus conventions (``_total`` counters, ``_seconds`` histograms). Labels are the
watch key (group/version/kind), never a resource name, so cardinality stays bounded by the kinds.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally

from prometheus_client import Counter, Gauge, Histogram

DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)

RECONCILES = Counter(
    "helm_operator_reconciles_total",
    "Reconciles of custom resources by watch, the Helm action they ran (none: nothing to do) and result",
    ["watch", "action", "result"],
)
RECONCILE_DURATION = Histogram(
    "helm_operator_reconcile_duration_seconds",
    "Time of one reconcile, from the handler's start to its status written",
    ["watch"],
    buckets=DURATION_BUCKETS,
)
HELM_ACTION_DURATION = Histogram(
    "helm_operator_helm_action_duration_seconds",
    "Time of one Helm action (install/upgrade, rollback, uninstall, pull), waiting for a slot excluded",
    ["action"],
    buckets=DURATION_BUCKETS,
)
RESYNCS = Counter(
    "helm_operator_resyncs_total",
    "Periodic resyncs by watch and how they were decided: memory (nothing changed, no API request) "
    "or read (the release and its objects were read again)",
    ["watch", "decided"],
)
HELM_PROCESSES = Counter(
    "helm_operator_helm_processes_total",
    "helm processes started, by helm command (upgrade, uninstall, version …)",
    ["command"],
)
HELM_QUEUE = Gauge(
    "helm_operator_helm_queue_depth",
    "Helm actions waiting for a free helm process slot (--max-helm-processes)",
)
QUEUE_DEPTH = Gauge(
    "helm_operator_queue_depth",
    "Reconciles and drift checks waiting for a slot of their kind (maxConcurrentReconciles)",
    ["watch"],
)
RELEASES = Gauge(
    "helm_operator_releases",
    "Releases by watch and by the state of their last reconcile (ready, progressing, failed, stalled)",
    ["watch", "state"],
)
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
HOOK_WATCH_OBJECTS = Gauge(
    "helm_operator_hook_watch_objects",
    "Objects held by the watches of watch hooks, by kind (a sharded instance: of the owners it holds)",
    ["kind"],
)
RELEASE_INDEX = Gauge(
    "helm_operator_release_index_releases",
    "Releases whose stored revisions the watch of Helm's storage tracks (a ring's shard: those it holds)",
)
DEPENDENT_CHANGES = Counter(
    "helm_operator_dependent_changes_total",
    "Changes of release objects the dependent watches saw, by what they meant: changed (compared "
    "with the release), readiness (a workload became ready or unready), applied (Helm's own write)",
    ["kind", "change"],
)
WATCH_CHECKS = Counter(
    "helm_operator_watch_checks_total",
    "Checks the dependent watches started: the objects compared with the release (objects), or "
    "only the workloads' readiness read (readiness)",
    ["watch", "read"],
)
DAY2_RUNS = Counter(
    "helm_operator_day2_runs_total",
    "Finished runs of day-2 schedules and actions by watch, hook (schedule/NAME, action/VERB) and "
    "result (Succeeded, Failed): an alert on failed scheduled backups needs no log scraping",
    ["watch", "hook", "result"],
)
BACKUP_LAST_VERIFIED = Gauge(
    "helm_operator_backup_last_verified_timestamp_seconds",
    "Unix time of the latest backup verification that succeeded (a backup restored into a throw-away "
    "instance and checked), by watch; each resource's own is in its status.day2.lastVerifiedBackup",
    ["watch"],
)
RESTORE_DURATION = Histogram(
    "helm_operator_restore_duration_seconds",
    "Time of one backup verification's restore: from the throw-away instance's creation until its "
    "check answered or it failed (scheduling and image pull included), by watch and result",
    ["watch", "result"],
    buckets=(*DURATION_BUCKETS, 1200, 1800, 3600),
)
BACKUP_VERIFICATIONS = Counter(
    "helm_operator_backup_verifications_total",
    "Backup verifications by watch and result (Succeeded, Failed)",
    ["watch", "result"],
)
CHART_UPGRADE_AVAILABLE = Gauge(
    "helm_operator_chart_upgrade_available",
    "Resources whose release runs an older chart version than the newest the watch serves (held "
    "back by a version pin, a window or an approval), by watch; each says so in its status.chart",
    ["watch"],
)
ROLLOUT_WAVE = Gauge(
    "helm_operator_rollout_wave",
    "The wave a watch's staged rollout is at (1: the first), and its phase (1 for the current one)",
    ["watch", "phase"],
)
ROLLOUT_RESOURCES = Gauge(
    "helm_operator_rollout_resources",
    "Resources of a watch's staged rollout: updated, failed, and not yet updated (pending)",
    ["watch", "state"],
)
LEADER = Gauge(
    "helm_operator_leader", "1 while this replica holds the leader lease (or runs without election)"
)

STATES = ("ready", "progressing", "failed", "stalled")


class ReleaseStates:
    """The state of each release's last reconcile, summed per watch into ``RELEASES``."""

    def __init__(self) -> None:
        self._state: dict[str, tuple[str, str]] = {}  # release key -> (watch, state)
        self._mutex = threading.Lock()

    def set(self, watch: str, release: str, state: str) -> None:
        with self._mutex:
            self._state[release] = (watch, state)
            self._publish(watch)

    def forget(self, watch: str, release: str) -> None:
        with self._mutex:
            self._state.pop(release, None)
            self._publish(watch)

    def _publish(self, watch: str) -> None:
        counts = Tally(s for w, s in self._state.values() if w == watch)
        for state in STATES:
            RELEASES.labels(watch=watch, state=state).set(counts.get(state, 0))


class UpgradesAvailable:
    """Which releases run an older chart version than their watch's newest, counted per watch into
    ``CHART_UPGRADE_AVAILABLE``."""

    def __init__(self) -> None:
        self._behind: dict[str, set[str]] = {}  # watch -> release keys
        self._mutex = threading.Lock()

    def set(self, watch: str, release: str, behind: bool) -> None:
        with self._mutex:
            keys = self._behind.setdefault(watch, set())
            if behind:
                keys.add(release)
            else:
                keys.discard(release)
            CHART_UPGRADE_AVAILABLE.labels(watch=watch).set(len(keys))


UPGRADES_AVAILABLE = UpgradesAvailable()
