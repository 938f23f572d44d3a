"""The ``Rollout`` custom resource: one per watch with a rollout policy, written by the operator.

Its status is the rollout's progress (``kubectl get rollouts``); its spec is how a person steers
it (``helm-operator rollout pause|resume|abort``). Shipped in ``config/`` with every project, so a
policy in watches.yaml is all it takes to stage rollouts.
"""

from __future__ import annotations

from typing import Any

from helm_operator.core.naming import ROLLOUT_GROUP as GROUP
from helm_operator.core.naming import ROLLOUT_KIND as KIND
from helm_operator.core.naming import ROLLOUT_PLURAL as PLURAL
from helm_operator.core.naming import ROLLOUT_VERSION as VERSION

CRD_NAME = f"{PLURAL}.{GROUP}"

FILE = "02-crd-rollouts.yaml"  # after the namespace and account, before the RBAC that names it


def _column(name: str, path: str, kind: str = "string") -> dict[str, str]:
    return {"name": name, "type": kind, "jsonPath": path}


def rollout_crd() -> dict[str, Any]:
    spec_schema = {
        "type": "object",
        "properties": {
            "paused": {"type": "boolean", "description": "No further wave starts while true."},
            "abort": {
                "type": "string",
                "description": "A rollout id: that rollout starts no further wave, ever.",
            },
            "retries": {
                "type": "integer",
                "minimum": 0,
                "description": "One more than the rollout has seen retries its halted wave.",
            },
        },
    }
    status_schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "categories": ["helm-operator"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        _column("Rollout", ".status.rollout"),
                        _column("Phase", ".status.phase"),
                        _column("Wave", ".status.wave"),
                        _column("Updated", ".status.updated"),
                        _column("Message", ".status.message"),
                        _column("Age", ".metadata.creationTimestamp", "date"),
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": spec_schema, "status": status_schema},
                        }
                    },
                }
            ],
        },
    }
