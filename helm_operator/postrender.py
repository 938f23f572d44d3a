"""Helm post-renderer: mark every object a release renders as owned by its custom resource.

Adds the owner label (what the dependent watches select on, server-side) and, where Kubernetes
allows it, an ownerReference to the CR so garbage collection also works. Objects annotated
``helm.sh/resource-policy: keep`` get no ownerReference (they must outlive the release).

Helm 3 runs a post-renderer executable found on ``PATH``; Helm 4 runs a ``postrender/v1`` plugin
found through ``HELM_PLUGINS``. ``install()`` lays out both under one name, so the same
``--post-renderer helm-operator-postrender`` flag works with either major version.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from helm_operator.release.state import OWNER_LABEL

NAME = "helm-operator-postrender"

# Kinds that cannot carry an ownerReference to a namespaced owner.
CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "Node",
        "PersistentVolume",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "StorageClass",
        "PriorityClass",
        "IngressClass",
        "RuntimeClass",
        "CSIDriver",
        "CSINode",
        "VolumeAttachment",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "APIService",
        "PodSecurityPolicy",
        "FlowSchema",
        "PriorityLevelConfiguration",
    }
)


def mark(
    docs: Iterable[Any], owner: str, owner_ref: Mapping[str, Any] | None, namespace: str | None
) -> list[dict[str, Any]]:
    out = []
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc:
            continue
        meta = doc.setdefault("metadata", {}) or {}
        doc["metadata"] = meta
        labels = meta.get("labels") or {}
        labels[OWNER_LABEL] = owner
        meta["labels"] = labels
        keep = (meta.get("annotations") or {}).get("helm.sh/resource-policy") == "keep"
        same_namespace = meta.get("namespace") in (None, namespace)
        if owner_ref and not keep and same_namespace and doc["kind"] not in CLUSTER_SCOPED:
            refs = [r for r in meta.get("ownerReferences") or [] if r.get("uid") != owner_ref.get("uid")]
            meta["ownerReferences"] = [*refs, dict(owner_ref)]
        out.append(doc)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=NAME)
    parser.add_argument("--owner", required=True, help="value of the owner label")
    parser.add_argument("--owner-ref", default="", help="ownerReference as JSON (omit for none)")
    parser.add_argument("--namespace", default=None, help="the release namespace")
    args = parser.parse_args(argv)
    owner_ref = json.loads(args.owner_ref) if args.owner_ref else None
    docs = mark(yaml.safe_load_all(sys.stdin), args.owner, owner_ref, args.namespace)
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
    return 0


def args_for(owner: str, owner_ref: Mapping[str, Any] | None, namespace: str) -> list[str]:
    """The ``--post-renderer*`` flags for one release (Helm 3 and 4 alike)."""
    out = ["--post-renderer", NAME]
    values = [f"--owner={owner}", f"--namespace={namespace}"]
    if owner_ref:
        values.append("--owner-ref=" + json.dumps(dict(owner_ref), separators=(",", ":")))
    for v in values:
        out += ["--post-renderer-args", v]
    return out


def install(base: Path) -> dict[str, str]:
    """Write the executable and the Helm 4 plugin under ``base``; return the env helm needs."""
    bindir, plugin = base / "bin", base / "plugins" / NAME
    bindir.mkdir(parents=True, exist_ok=True)
    plugin.mkdir(parents=True, exist_ok=True)
    script = f'#!/bin/sh\nexec "{sys.executable}" -m helm_operator.postrender "$@"\n'
    for exe in (bindir / NAME, plugin / NAME):
        exe.write_text(script)
        exe.chmod(0o755)
    (plugin / "plugin.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "type": "postrenderer/v1",
                "name": NAME,
                "version": "0.1.0",
                "runtime": "subprocess",
                "runtimeConfig": {"platformCommand": [{"command": "${HELM_PLUGIN_DIR}/" + NAME}]},
            },
            sort_keys=False,
        )
    )
    return {
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        "HELM_PLUGINS": str(base / "plugins"),
    }


if __name__ == "__main__":
    sys.exit(main())
