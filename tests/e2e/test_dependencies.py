"""Dependencies between resources on the local control plane: a resource waits for what it names
to be ready, a cycle is reported by name (also one closed between running releases), a bad entry
is a precise stall, and uninstalls run in the reverse order."""

from __future__ import annotations

import time
from typing import Any

from helm_operator.core.naming import DEPENDS_ON_ANNOTATION

from .conftest import Helm, custom, releases, tiny
from .operator import OperatorProcess, Resources, eventually

MEMCACHED = "memcacheds.cache.example.com"
TINY = "tinies.test.helm-operator.io"


def depending(doc: dict[str, Any], on: str) -> dict[str, Any]:
    doc["metadata"]["annotations"] = {DEPENDS_ON_ANNOTATION: on}
    return doc


def test_a_resource_waits_for_its_dependency_and_is_uninstalled_before_it(
    operator: OperatorProcess, res: Resources, helm4: Helm
) -> None:
    on_cache = f"cache.example.com/v1alpha1/Memcached/{res.ns}/cache:Ready"
    res.apply(depending(tiny("app"), on_cache))
    waiting = res.wait_condition(TINY, "app", "Reconciling", timeout=60)
    assert waiting["reason"] == "DependencyNotReady", waiting
    assert f"Memcached/{res.ns}/cache (Ready): not found" in waiting["message"], waiting
    assert res.condition(TINY, "app", "Ready")["status"] == "False"
    res.wait_event("app", "DependencyNotReady")
    time.sleep(3)
    assert "app" not in releases(helm4, res.ns), "no install before the dependency is ready"

    res.apply(custom("cache.example.com/v1alpha1", "Memcached", "cache", {"size": 1}))
    res.wait_condition(MEMCACHED, "cache", "Ready", timeout=60)
    res.wait_condition(TINY, "app", "Ready", timeout=30)  # looked at again within seconds
    assert releases(helm4, res.ns)["app"]["revision"] == "1"

    # Both deleted at once: the one that is depended on goes last.
    res.cluster.kubectl("delete", MEMCACHED, "cache", "-n", res.ns, "--wait=false")
    time.sleep(1)  # its uninstall is held first, with the reason on the resource
    blocked = res.wait_condition(MEMCACHED, "cache", "Ready", status="False", timeout=30, generation=False)
    assert blocked["reason"] == "DependentsRemain" and f"Tiny/{res.ns}/app" in blocked["message"], blocked
    assert "cache" in releases(helm4, res.ns)
    res.cluster.kubectl("delete", TINY, "app", "-n", res.ns, "--wait=false")
    gone: dict[str, float] = {}

    def both_gone() -> bool:
        now, listed = time.monotonic(), releases(helm4, res.ns)
        for name in ("app", "cache"):
            if name not in listed:
                gone.setdefault(name, now)
        return len(gone) == 2

    eventually(both_gone, timeout=60, interval=0.2, what="both releases uninstalled")
    assert gone["app"] < gone["cache"], gone
    eventually(lambda: not res.exists(MEMCACHED, "cache"), timeout=30, what="the dependency deleted")


def test_a_cycle_is_named_and_released_once_it_is_broken(
    operator: OperatorProcess, res: Resources, helm4: Helm
) -> None:
    on = lambda name: f"test.helm-operator.io/v1/Tiny/{name}"  # noqa: E731
    res.apply(depending(tiny("c"), on("d")))
    res.apply(depending(tiny("d"), on("c")))
    for name, cycle in (("c", "c → Tiny/{ns}/d → Tiny/{ns}/c"), ("d", "d → Tiny/{ns}/c → Tiny/{ns}/d")):
        stalled = res.wait_condition(TINY, name, "Stalled", timeout=60)
        assert stalled["reason"] == "DependencyCycle", stalled
        assert f"Tiny/{res.ns}/" + cycle.format(ns=res.ns) in stalled["message"], stalled
    assert not {"c", "d"} & set(releases(helm4, res.ns))

    res.apply(tiny("d"))  # the annotation removed: the cycle is broken
    res.wait_condition(TINY, "d", "Ready", timeout=60)
    res.wait_condition(TINY, "c", "Ready", timeout=60)

    # Closed again between two running releases (no Helm action is due): said when it closes.
    res.apply(depending(tiny("d"), on("c")))
    closed = res.wait_condition(TINY, "d", "Stalled", timeout=60)
    assert closed["reason"] == "DependencyCycle", closed
    res.wait_event("d", "DependencyCycle")
    assert releases(helm4, res.ns)["d"]["revision"] == "1", "the running release stays as it is"
    res.apply(tiny("d"))  # broken again: uninstalls have an order
    res.wait_condition(TINY, "d", "Stalled", status="False", timeout=60)

    res.apply(depending(tiny("e"), "Tiny/c"))
    bad = res.wait_condition(TINY, "e", "Stalled", timeout=60)
    assert bad["reason"] == "InvalidDependency" and DEPENDS_ON_ANNOTATION in bad["message"], bad
    assert "expected <apiVersion>/<Kind>/[<namespace>/]<name>" in bad["message"], bad
    for name in ("c", "d", "e"):
        res.delete(TINY, name)
