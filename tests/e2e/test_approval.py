"""Plan and approve on the local control plane: with approval: manual no helm call is made before
the plan is approved, the change applied is exactly the approved plan, a change after an approval
voids it, and a bad approval value is a precise stall."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from helm_operator.core.naming import APPROVAL_ANNOTATION, APPROVE_ANNOTATION

from .conftest import Helm, crd, custom, ready_wait_times_out, releases
from .operator import OperatorProcess, Resources, eventually

MEMCACHED = "memcacheds.cache.example.com"


def memcached(size: int, **annotations: str) -> dict[str, Any]:
    doc = custom("cache.example.com/v1alpha1", "Memcached", "gated", {"size": size})
    doc["metadata"]["annotations"] = {APPROVAL_ANNOTATION: "manual", **annotations}
    return doc


def plan_cli(
    res: Resources, *args: str, resource: str = "memcached", name: str = "gated"
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "helm_operator.cli", "plan", *args, resource, name, "-n", res.ns]
    cmd += ["--kubeconfig", str(res.cluster.kubeconfig)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def plan_of(res: Resources) -> dict[str, Any]:
    return dict(((res.get(MEMCACHED, "gated") or {}).get("status") or {}).get("plan") or {})


def waiting_plan(res: Resources, action: str, previous: str | None = None) -> dict[str, Any]:
    """The plan that waits, once it is recorded (a new one when ``previous`` names the last)."""
    res.wait_condition(MEMCACHED, "gated", "ApprovalPending", timeout=60)

    def new() -> dict[str, Any] | None:
        plan = plan_of(res)
        return plan if plan.get("action") == action and plan.get("id") != previous else None

    found: dict[str, Any] = eventually(new, timeout=30, what=f"a {action} plan")
    return found


def helm_calls(op: OperatorProcess, ns: str) -> list[str]:
    """The helm calls that could change the release (the plan's render is a server-side dry-run)."""
    return [
        c for c in op.helm_calls() if "gated" in c.split() and ns in c.split() and "--dry-run=server" not in c
    ]


def test_nothing_is_applied_before_approval_and_exactly_the_approved_plan_is(
    operator: OperatorProcess, res: Resources, helm4: Helm
) -> None:
    res.apply(memcached(1))
    install = waiting_plan(res, "install")
    assert install["created"] >= 2 and any(o.startswith("create Deployment/") for o in install["objects"]), (
        install
    )
    assert "from no release" in install["summary"]
    res.wait_event("gated", "PlanReady")
    assert "gated" not in releases(helm4, res.ns) and not helm_calls(operator, res.ns), (
        "no helm before approval"
    )

    shown = plan_cli(res, "show")
    assert (
        shown.returncode == 0 and install["id"] in shown.stdout and "waiting for approval" in shown.stdout
    ), shown
    approved = plan_cli(res, "approve", "--id", install["id"])
    assert approved.returncode == 0, approved.stderr
    res.wait_condition(MEMCACHED, "gated", "Ready", timeout=60)
    assert releases(helm4, res.ns)["gated"]["revision"] == "1"
    eventually(lambda: plan_of(res).get("approvedAt"), timeout=30, what="the plan stamped approved")
    assert res.condition(MEMCACHED, "gated", "ApprovalPending")["status"] == "False"
    res.wait_event("gated", "PlanApproved", install["id"])

    # A change: a new plan; the approval of the install, still on the resource, was used: it lets
    # nothing through and is not blamed as an approval of another plan.
    res.apply(memcached(2, **{APPROVE_ANNOTATION: install["id"]}))
    two = waiting_plan(res, "upgrade", previous=install["id"])
    # The plan names what changes in each object it updates (paths, never values).
    assert two["fromRevision"] == 1, two
    assert any(
        o.startswith("update Deployment/") and o.endswith(": /spec/replicas") for o in two["objects"]
    ), two
    assert ": /spec/replicas" in plan_cli(res, "show").stdout
    waits = res.wait_condition(MEMCACHED, "gated", "ApprovalPending", timeout=30)
    assert waits["reason"] == "AwaitingApproval" and "for another plan" not in waits["message"], waits
    assert two["id"] in waits["message"], waits
    assert not any(e["reason"] == "StaleApproval" for e in res.events("gated"))
    ready = res.condition(MEMCACHED, "gated", "Ready")  # revision 1 runs, healthy: generation 1's
    assert (ready["status"], ready["observedGeneration"]) == ("True", 1), ready
    # The held change reads as in progress: a wait for Ready waits for the approved upgrade.
    assert (res.get(MEMCACHED, "gated") or {})["status"]["observedGeneration"] == 1
    assert res.condition(MEMCACHED, "gated", "Reconciling")["reason"] == "AwaitingApproval"
    ready_wait_times_out(res, MEMCACHED, "gated")

    # Approved, but the spec changes in the same write: the approval is void, nothing runs.
    res.apply(memcached(3, **{APPROVE_ANNOTATION: two["id"]}))
    three = waiting_plan(res, "upgrade", previous=two["id"])
    stale = res.wait_condition(MEMCACHED, "gated", "ApprovalPending", timeout=30)
    assert stale["reason"] == "StaleApproval" and two["id"] in stale["message"], stale
    refused = plan_cli(res, "approve", "--id", two["id"])
    assert refused.returncode == 1 and "is not the plan that waits" in refused.stderr, refused
    assert releases(helm4, res.ns)["gated"]["revision"] == "1"
    assert int((res.get("deployment", "gated") or {})["spec"]["replicas"]) == 1

    assert plan_cli(res, "approve", "--id", three["id"]).returncode == 0
    eventually(
        lambda: releases(helm4, res.ns)["gated"]["revision"] == "2", timeout=60, what="the approved upgrade"
    )
    res.wait_condition(MEMCACHED, "gated", "ApprovalPending", status="False", timeout=30)
    res.cluster.kubectl("wait", "--for=condition=Ready", f"{MEMCACHED}/gated", "-n", res.ns, "--timeout=60s")
    assert int((res.get("deployment", "gated") or {})["spec"]["replicas"]) == 3  # exactly the approved plan
    # The install and the one approved upgrade, nothing else: two revisions (more helm processes
    # only if a call failed before it wrote one, and was tried again).
    upgrades = [c for c in helm_calls(operator, res.ns) if c.startswith("upgrade")]
    assert len(upgrades) >= 2, upgrades
    history = json.loads(helm4("history", "gated", "-n", res.ns, "-o", "json").stdout)
    assert [(h["revision"], h["status"]) for h in history] == [(1, "superseded"), (2, "deployed")], history
    shown = plan_cli(res, "show", "-o", "json")
    assert json.loads(shown.stdout)["id"] == three["id"] and json.loads(shown.stdout)["approvedAt"]
    res.delete(MEMCACHED, "gated")


def test_an_approval_mode_that_is_not_one_is_a_precise_stall(
    operator: OperatorProcess, res: Resources
) -> None:
    doc = memcached(1)
    doc["metadata"]["annotations"][APPROVAL_ANNOTATION] = "sometimes"
    res.apply(doc)
    stalled = res.wait_condition(MEMCACHED, "gated", "Stalled", timeout=60)
    assert (
        stalled["reason"] == "InvalidApproval"
        and "expected manual or automatic, got 'sometimes'" in stalled["message"]
    ), stalled
    res.delete(MEMCACHED, "gated")


def test_plan_finds_a_kind_created_after_its_last_call(operator: OperatorProcess, res: Resources) -> None:
    """``plan show`` resolves a kind from discovery read for the call: one whose CRD was created
    after an earlier call is found (the kubernetes client's default cache, one file per server
    address for the machine, still missed it, and held the kinds of another cluster that had the
    same address)."""
    group = f"plan-{os.urandom(3).hex()}.test.helm-operator.io"
    missing = plan_cli(res, "show", resource=f"widgets.{group}", name="w")
    assert missing.returncode != 0 and "serves no resource named" in missing.stderr, missing
    widgets = crd(group, "Widget", "widgets")
    try:
        res.cluster.kubectl("apply", "-f", "-", input=json.dumps(widgets))
        res.cluster.kubectl("wait", "--for=condition=Established", f"crd/widgets.{group}", "--timeout=60s")
        found = plan_cli(res, "show", resource=f"widgets.{group}", name="w")
        assert found.returncode != 0 and f"Widget w not found in {res.ns}" in found.stderr, found
    finally:
        res.cluster.kubectl("delete", "crd", f"widgets.{group}", "--ignore-not-found", check=False)
