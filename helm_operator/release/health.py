"""Are the release's workloads actually ready? Pure: kstatus-style rules over live objects.

Helm's ``--wait`` says so once, at install or upgrade time; afterwards Pods die, volumes stay
unbound, Jobs fail. The operator already reads every live object of a release for drift checks;
this turns those objects into a verdict that ``Ready`` follows, naming what is not ready.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

WORKLOAD_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "Job", "PersistentVolumeClaim"})


@dataclass(frozen=True)
class Health:
    unready: tuple[str, ...] = ()  # "Deployment/web: 1/3 replicas available"

    @property
    def ready(self) -> bool:
        return not self.unready

    def message(self) -> str:
        return "not ready: " + "; ".join(self.unready) if self.unready else "all workloads are ready"


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int) else 0


def _generation_pending(obj: Mapping[str, Any]) -> bool:
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    observed = status.get("observedGeneration")
    return observed is not None and _int(observed) < _int(meta.get("generation"))


def _condition(obj: Mapping[str, Any], ctype: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return str(c.get("status"))
    return None


def why_unready(obj: Mapping[str, Any]) -> str | None:
    """Why a workload object is not ready yet, or None when it is (or is not a workload)."""
    kind = obj.get("kind")
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if kind not in WORKLOAD_KINDS:
        return None
    if kind != "PersistentVolumeClaim" and _generation_pending(obj):
        return "its controller has not seen the latest spec"
    if kind == "Deployment":
        want = _int(spec.get("replicas", 1))
        updated, available = _int(status.get("updatedReplicas")), _int(status.get("availableReplicas"))
        if updated < want or available < want:
            return f"{available}/{want} replicas available, {updated} updated"
    elif kind == "StatefulSet":
        want = _int(spec.get("replicas", 1))
        ready = _int(status.get("readyReplicas"))
        if ready < want:
            return f"{ready}/{want} replicas ready"
        # OnDelete: the controller restarts nobody (currentRevision never moves); who does (a
        # hook, a person) decides which members must run the new template, as kstatus reads it.
        on_delete = (spec.get("updateStrategy") or {}).get("type") == "OnDelete"
        if (
            not on_delete
            and status.get("updateRevision")
            and status.get("currentRevision") != status.get("updateRevision")
        ):
            return "rolling out a new revision"
    elif kind == "DaemonSet":
        want = _int(status.get("desiredNumberScheduled"))
        ready, updated = _int(status.get("numberReady")), _int(status.get("updatedNumberScheduled"))
        if ready < want or updated < want:
            return f"{ready}/{want} Pods ready, {updated} updated"
    elif kind == "Job":
        if _condition(obj, "Failed") == "True":
            return "failed"
        if _condition(obj, "Complete") != "True":
            return "not complete"
    elif kind == "PersistentVolumeClaim" and status.get("phase") != "Bound":
        return f"{status.get('phase') or 'Pending'}, not Bound"
    return None


def assess(objects: Iterable[Mapping[str, Any] | None]) -> Health:
    """The health of a release from its live objects (None: a deleted object, which drift handles)."""
    unready = []
    for obj in objects:
        if obj is None:
            continue
        why = why_unready(obj)
        if why is not None:
            unready.append(f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}: {why}")
    return Health(tuple(sorted(unready)))
