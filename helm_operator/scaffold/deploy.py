"""How an operator built on helm-operator is deployed: its image and its manifests.

One renderer for both this repository (``Dockerfile``, ``config/``: the sample operator) and every
project ``helm-operator init`` creates, so the two cannot drift apart; a unit test compares the
committed files with what is rendered here. The image runs as a non-root numeric user on a
read-only root filesystem: everything written at run time (HOME, TMPDIR, Helm's cache/config/data,
the post-renderer, pulled charts) goes to ``/tmp``, an emptyDir in the Deployment.

``python -m helm_operator.scaffold.deploy [DIR]`` rewrites the repository's files (DIR: the
checkout, default the current directory).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HELM_VERSION = "v4.3.1"  # tools/bootstrap's HELM4 pin (tests/unit/test_dockerfile.py keeps them equal)
GO_IMAGE = "golang:1.26"  # recent helm tags need Go >= 1.26, as tools/bootstrap does
PYTHON_IMAGE = "python:3.11-slim"
UID = 65532  # the conventional "nonroot" user of distroless images
APP_DIR = "/opt/helm-operator"
WRITABLE = "/tmp"
RBAC_FILE = "02-rbac.yaml"
NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"  # tells the Deployments of static shards apart

REPO_HEADER = (
    "# Rendered by helm_operator/scaffold/deploy.py: `python -m helm_operator.scaffold.deploy` rewrites it.\n"
)


@dataclass(frozen=True)
class Deploy:
    """What varies between operators: their name, namespace and image."""

    name: str = "helm-operator"
    namespace: str = "helm-operator-system"
    image: str = "helm-operator:dev"
    replicas: int = 2
    metrics_port: int = 8080
    probe_port: int = 8081
    conversion_port: int = 9444  # the conversion webhook (served when hooks declare converters)
    # Static shards: a Deployment per shard (``run --shard NAME``) and one for the resources
    # without the shard label (``--unsharded``); empty: one Deployment serving every resource.
    shards: tuple[str, ...] = ()
    # Dynamic shards: every replica is a shard of this ControllerRing (its Pod name names its Lease).
    ring: str | None = None


def _meta(d: Deploy, name: str | None = None, namespaced: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name or d.name}
    if namespaced:
        meta["namespace"] = d.namespace
    meta["labels"] = {NAME_LABEL: d.name}
    return meta


def namespace(d: Deploy) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": d.namespace,
            "labels": {
                NAME_LABEL: d.name,
                # The operator's Pods meet the "restricted" Pod Security Standard; say so.
                "pod-security.kubernetes.io/enforce": "restricted",
            },
        },
    }


def service_account(d: Deploy) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(d)}


def deployment(d: Deploy, shard: str | None = None) -> dict[str, Any]:
    """Replicas elect a leader (only it acts); probes and metrics on their own ports. ``shard``:
    the Deployment of one static shard ("": the unsharded one), its replicas electing their own
    leader."""
    name = d.name if shard is None else f"{d.name}-shard-{shard}" if shard else f"{d.name}-unsharded"
    selector = {NAME_LABEL: d.name} if shard is None else {NAME_LABEL: d.name, INSTANCE_LABEL: name}
    sharding = [] if shard is None else [f"--shard={shard}"] if shard else ["--unsharded"]
    container = {
        "name": "operator",
        "image": d.image,
        "imagePullPolicy": "IfNotPresent",
        "args": [
            *([f"--controller-ring={d.ring}"] if d.ring else ["--leader-elect"]),
            *sharding,
            f"--metrics-bind-address=:{d.metrics_port}",
            f"--health-probe-bind-address=:{d.probe_port}",
            f"--conversion-bind-address=:{d.conversion_port}",
            f"--conversion-service={d.namespace}/{d.name}-conversion:443",
        ],
        "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "ports": [
            {"name": "metrics", "containerPort": d.metrics_port, "protocol": "TCP"},
            {"name": "probes", "containerPort": d.probe_port, "protocol": "TCP"},
            {"name": "conversion", "containerPort": d.conversion_port, "protocol": "TCP"},
        ],
        # Start-up (imports, the first listing) takes seconds on an idle node and far longer on a
        # loaded one: liveness only starts once /healthz first answered, instead of after a fixed delay
        # a busy node outlasts.
        "startupProbe": {
            "httpGet": {"path": "/healthz", "port": "probes"},
            "periodSeconds": 2,
            "failureThreshold": 90,
        },
        # A thread of the operator's process answers the probes; on a loaded node it may run seconds
        # later. Liveness itself fails only once the event loop has stalled for 30 s, so each probe
        # has 5 s to be answered: the kubelet's default of 1 s would count a busy, healthy process
        # as failing (and restart it after three such answers).
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "probes"},
            "periodSeconds": 20,
            "timeoutSeconds": 5,
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "probes"},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
        },
        # helm processes (up to --max-helm-processes at once) live in this budget too.
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"cpu": "1", "memory": "1Gi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": WRITABLE}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**_meta(d, name), "labels": selector},
        "spec": {
            "replicas": d.replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "serviceAccountName": d.name,
                    # An action in flight gets time to finish (helm is never left pending-*).
                    "terminationGracePeriodSeconds": 150,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": UID,
                        "runAsGroup": UID,
                        "fsGroup": UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "affinity": {
                        "podAntiAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "weight": 100,
                                    "podAffinityTerm": {
                                        "topologyKey": "kubernetes.io/hostname",
                                        "labelSelector": {"matchLabels": selector},
                                    },
                                }
                            ]
                        }
                    },
                    "containers": [container],
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
                },
            },
        },
    }


def _service(d: Deploy, name: str, port: int) -> dict[str, Any]:
    """A Service to every replica's container port ``name``."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(d, f"{d.name}-{name}"),
        "spec": {
            "selector": {NAME_LABEL: d.name},
            "ports": [{"name": name, "port": port, "targetPort": name, "protocol": "TCP"}],
        },
    }


def metrics_service(d: Deploy) -> dict[str, Any]:
    return _service(d, "metrics", d.metrics_port)


def conversion_service(d: Deploy) -> dict[str, Any]:
    """How the API server reaches the conversion webhook every replica serves (any of them).

    Not-ready replicas are endpoints too: a leader is not ready until it has handled every
    resource, and listing them in the hub version needs this webhook when they are stored in
    another one; a Service waiting for readiness would deadlock a single replica.
    """
    service = _service(d, "conversion", 443)
    service["spec"]["publishNotReadyAddresses"] = True
    return service


class Flow(list[Any]):
    """A list written on one line (``[get, list, watch]``)."""


class _Dumper(yaml.SafeDumper):
    """Writes a value shared by two fields twice rather than as a YAML anchor and alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_Dumper.add_representer(
    Flow, lambda dumper, data: dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)
)


def dump(doc: Mapping[str, Any]) -> str:
    """A manifest as people write it: keys in insertion order, block style, no anchors."""
    return yaml.dump(dict(doc), Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def to_yaml(doc: Mapping[str, Any], header: str) -> str:
    return header + dump(doc)


def config_files(d: Deploy, header: str = REPO_HEADER) -> dict[str, str]:
    """``config/`` without the RBAC (``helm-operator rbac`` writes that from the charts).

    Numbered so that ``kubectl apply -f config/`` creates the namespace first and the
    permissions before the Pods that need them.
    """
    from helm_operator.scaffold.rollout_crd import FILE, rollout_crd

    deployments = [deployment(d)] if not d.shards else [deployment(d, s) for s in (*d.shards, "")]
    return {
        FILE: to_yaml(rollout_crd(), header),
        "00-namespace.yaml": to_yaml(namespace(d), header),
        "01-service-account.yaml": to_yaml(service_account(d), header),
        "03-deployment.yaml": header + "---\n".join(dump(doc) for doc in deployments),
        "04-metrics-service.yaml": to_yaml(metrics_service(d), header),
        "05-conversion-service.yaml": to_yaml(conversion_service(d), header),
    }


@dataclass(frozen=True)
class FromCheckout:
    """Build the operator's wheel from this source tree (the repository's own image)."""


@dataclass(frozen=True)
class FromPackage:
    """Install a released helm-operator (PyPI, or a wheel dropped into ``dist/``)."""

    version: str


def _helm_stage() -> str:
    ldflags = " ".join(
        (
            "-s -w",
            f"-X helm.sh/helm/v4/internal/version.version={HELM_VERSION}",
            "-X helm.sh/helm/v4/internal/version.gitTreeState=clean",
        )
    )
    return f"""\
# helm from its Go module at the pinned version, with the version stamped in (the operator reads
# `helm version` to choose Helm 4's flags).
FROM {GO_IMAGE} AS helm
ENV CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
RUN go install -trimpath -ldflags "{ldflags}" helm.sh/helm/v4/cmd/helm@{HELM_VERSION} \\
 && /go/bin/helm version --short | grep -q '^{HELM_VERSION}'
"""


_RUNTIME_ENV = f"""\
# Read-only root filesystem: everything written at run time goes to {WRITABLE} (an emptyDir).
ENV HOME={WRITABLE} \\
    TMPDIR={WRITABLE} \\
    HELM_CACHE_HOME={WRITABLE}/helm/cache \\
    HELM_CONFIG_HOME={WRITABLE}/helm/config \\
    HELM_DATA_HOME={WRITABLE}/helm/data \\
    HELM_OPERATOR_HELM=/usr/local/bin/helm \\
    PYTHONDONTWRITEBYTECODE=1 \\
    PYTHONUNBUFFERED=1
COPY --from=helm /go/bin/helm /usr/local/bin/helm
"""

_PROJECT = f"""\
COPY watches.yaml {APP_DIR}/watches.yaml
COPY charts {APP_DIR}/charts
COPY hooks {APP_DIR}/hooks
WORKDIR {APP_DIR}
USER {UID}:{UID}
ENTRYPOINT ["helm-operator", "run", "--watches-file", "{APP_DIR}/watches.yaml"]
"""


def dockerfile(source: FromCheckout | FromPackage, tag: str) -> str:
    """A multi-stage Dockerfile: helm built from source, the operator, the project's charts."""
    head = f"""\
# docker build -t {tag} .
# Runs as user {UID} with a read-only root filesystem; watches.yaml, charts/ and hooks/ are in {APP_DIR}.

"""
    if isinstance(source, FromCheckout):
        install = f"""\
FROM {PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY helm_operator ./helm_operator
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM {PYTHON_IMAGE}
{_RUNTIME_ENV}COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
"""
    else:
        install = f"""\
FROM {PYTHON_IMAGE}
# helm-operator: the wheel of this version in dist/, installed by its path (nothing from an index),
# else the release of that name from PyPI.
ARG HELM_OPERATOR_VERSION={source.version}
{_RUNTIME_ENV}COPY dist /tmp/dist
RUN set -e; wheel=$(ls /tmp/dist/helm_operator-"${{HELM_OPERATOR_VERSION}}"-*.whl 2>/dev/null | head -n 1); \\
    if [ -n "$wheel" ]; then pip install --no-cache-dir "$wheel"; \\
    else pip install --no-cache-dir "helm-operator==${{HELM_OPERATOR_VERSION}}"; fi; \\
    rm -rf /tmp/dist
"""
    return head + _helm_stage() + "\n" + install + _PROJECT


def dockerignore(source: FromCheckout | FromPackage) -> str:
    """Send the builder only what the Dockerfile copies (never .git, virtualenvs or caches)."""
    keep = ["watches.yaml", "charts/", "hooks/"]
    keep += (
        ["pyproject.toml", "README.md", "helm_operator/"] if isinstance(source, FromCheckout) else ["dist/"]
    )
    lines = ["# Everything is left out of the build context but what the Dockerfile copies.", "*"]
    lines += [f"!{k}" for k in keep]
    lines += ["**/__pycache__", "**/*.pyc"]
    return "\n".join(lines) + "\n"


def repository_files() -> dict[str, str]:
    """This repository's image and manifests (the sample operator), by path."""
    files = {f"config/{name}": text for name, text in config_files(Deploy()).items()}
    files["Dockerfile"] = REPO_HEADER + dockerfile(FromCheckout(), Deploy().image)
    files[".dockerignore"] = REPO_HEADER + dockerignore(FromCheckout())
    return files


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else ".")
    if not (root / "pyproject.toml").is_file() or not (root / "helm_operator").is_dir():
        print(f"{root.resolve()} is not a helm-operator checkout", file=sys.stderr)
        return 2
    for rel, text in repository_files().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
