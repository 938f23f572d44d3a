"""A day-2 Job runs where the chart's Pods run: the release's nodeSelector, tolerations and node
affinity are its own (a backup Job of a database on a tainted pool must reach that pool)."""

from __future__ import annotations

import logging
from typing import Any

from helm_operator.hooks.builtin import backup, jobs
from helm_operator.hooks.context import Context

TOLERATION = {"key": "pool", "operator": "Equal", "value": "db", "effect": "NoSchedule"}
NODE_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]
    }
}


def _job(spec: dict[str, Any], pod: dict[str, Any] | None = None) -> dict[str, Any]:
    resource = {"apiVersion": "db.example.com/v1", "kind": "Db", "metadata": {"name": "d", "namespace": "n"}}
    ctx = Context(
        resource=resource,
        values=spec,
        release=None,
        kube=None,  # type: ignore[arg-type]  # building a Job talks to nobody
        day2=None,  # type: ignore[arg-type]
        events=None,  # type: ignore[arg-type]
        log=logging.LoggerAdapter(logging.getLogger(__name__), {}),
    )
    container = jobs.command("c", "img:1", ["true"])
    return backup.job(ctx, "b1", "backup", [container], pod=pod)["spec"]["template"]["spec"]


def test_a_job_takes_the_charts_placement() -> None:
    pod = _job(
        {
            "nodeSelector": {"pool": "db"},
            "tolerations": [TOLERATION],
            "affinity": {"nodeAffinity": NODE_AFFINITY, "podAntiAffinity": {"x": 1}},
        }
    )
    assert pod["nodeSelector"] == {"pool": "db"}
    assert pod["tolerations"] == [TOLERATION]
    # Pod (anti-)affinity is about the chart's own Pods, which a Job is not.
    assert pod["affinity"] == {"nodeAffinity": NODE_AFFINITY}


def test_values_as_the_operator_hands_them_read_only_are_taken_too() -> None:
    from helm_operator.hooks.context import frozen

    pod = _job(frozen({"tolerations": [TOLERATION], "nodeSelector": {"pool": "db"}}))  # type: ignore[arg-type]
    assert pod["tolerations"] == [TOLERATION] and pod["nodeSelector"] == {"pool": "db"}


def test_without_placement_values_a_job_has_none_and_the_hook_may_override() -> None:
    pod = _job({"replicas": 3})
    assert not {"nodeSelector", "tolerations", "affinity"} & pod.keys()
    pod = _job({"nodeSelector": {"pool": "db"}}, pod={"nodeSelector": {"pool": "backup"}})
    assert pod["nodeSelector"] == {"pool": "backup"}
