"""The workload every contender gets: the same chart, the same release names, the same values.

Each contender has its own API group (so no contender ever sees another's custom resources) and
its own namespace; kind, names and values are identical. Helm's release Secrets tell the bench what
is deployed, whoever deployed it: pure helpers here turn their labels into per-release facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHART = Path(__file__).resolve().parent / "charts" / "podinfo"
KIND = "Podinfo"
PLURAL = "podinfos"
VERSION = "v1"
DRIFT_KINDS = ("configmap-edited", "deployment-scaled", "service-deleted")


def group(contender: str) -> str:
    return f"{contender}.bench.example.com"


def release_names(n: int) -> list[str]:
    """Release (and CR) names; they contain the chart name, so every object is named the same."""
    return [f"podinfo-{i:04d}" for i in range(n)]


def values(wave: int) -> dict[str, Any]:
    """The values of wave 1 (install) and of each update wave: one value changes."""
    return {"ui": {"message": marker(wave)}, "replicaCount": 1}


def marker(wave: int) -> str:
    """A string that appears in the rendered manifest of ``wave`` and of no other."""
    return f"bench-wave-{wave}"


def crd(contender: str) -> dict[str, Any]:
    """A CRD for the contender's kind: open schema (the chart's values), status subresource."""
    g = group(contender)
    open_object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{g}"},
        "spec": {
            "group": g,
            "scope": "Namespaced",
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": KIND.lower()},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": open_object, "status": open_object},
                        }
                    },
                }
            ],
        },
    }


def custom_resource(contender: str, name: str, wave: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{group(contender)}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": values(wave),
    }


@dataclass(frozen=True)
class ReleaseRecord:
    """One Helm release Secret, from its labels (``name``, ``version``, ``status``)."""

    name: str
    revision: int
    status: str


def records_from_metadata(items: list[dict[str, Any]]) -> list[ReleaseRecord]:
    out = []
    for item in items:
        labels = (item.get("metadata") or {}).get("labels") or {}
        if labels.get("owner") != "helm" or "name" not in labels:
            continue
        try:
            revision = int(labels.get("version", "0"))
        except ValueError:
            continue
        out.append(ReleaseRecord(labels["name"], revision, labels.get("status", "")))
    return out


def deployed_at_least(records: list[ReleaseRecord], revision: int) -> set[str]:
    """Releases whose deployed revision is ``revision`` or later."""
    return {r.name for r in records if r.status == "deployed" and r.revision >= revision}


def latest_revision(records: list[ReleaseRecord]) -> dict[str, int]:
    """The newest revision number per release: how many revisions were ever made, one per install
    or upgrade. Counting stored Secrets would not do: history is bounded, and the SDK deletes every
    revision but the deployed one on each reconcile."""
    latest: dict[str, int] = {}
    for r in records:
        latest[r.name] = max(latest.get(r.name, 0), r.revision)
    return latest


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return {}


def _current(obj: dict[str, Any], ctype: str) -> bool:
    c = condition(obj, ctype)
    return c.get("status") == "True" and c.get("observedGeneration") == (obj.get("metadata") or {}).get(
        "generation"
    )


def ours_reports_success(obj: dict[str, Any]) -> bool:
    """Ours: Released=True for the CR's current generation: Helm deployed this spec, what the SDK's
    Deployed=True says."""
    return _current(obj, "Released")


def ours_reports_ready(obj: dict[str, Any]) -> bool:
    """Ours: Ready=True for the current generation (kstatus): also every workload ready, which
    takes the cluster's controllers (and KWOK) a while after Helm is done; the SDK has no such
    condition."""
    return _current(obj, "Ready")


def sdk_reports_success(obj: dict[str, Any], wave: int) -> bool:
    """The SDK (v1.42.3) writes no observedGeneration: Deployed=True and a deployed manifest that
    carries this wave's value are the proof that the status describes the current spec."""
    deployed = condition(obj, "Deployed")
    manifest = ((obj.get("status") or {}).get("deployedRelease") or {}).get("manifest") or ""
    return deployed.get("status") == "True" and marker(wave) in manifest
