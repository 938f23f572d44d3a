"""Where the pinned binaries built by ``tools/bootstrap`` live.

The bootstrap script and this module agree on one layout:
``$HELM_OPERATOR_TOOLS/<name>-<version>/`` (default ``~/.cache/helm-operator/tools``).
Each path can be overridden by its own environment variable, so a user can point the
operator at a ``helm`` of their own.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BOOTSTRAP = REPO_ROOT / "tools" / "bootstrap"


class ToolsMissing(RuntimeError):
    """A binary the product needs has not been built yet (or there is no checkout to build it from)."""


def require_checkout() -> None:
    """``helm-operator dev`` builds its tools with the checkout's ``tools/bootstrap`` and applies its
    ``crds/`` and ``samples/``: an installed package alone (``pip install``) has none of them."""
    if not BOOTSTRAP.is_file():
        raise ToolsMissing(
            "`helm-operator dev` works from a checkout of the helm-operator repository "
            f"(it uses tools/bootstrap, crds/ and samples/; none at {REPO_ROOT}): "
            "clone it and run `pip install -e .` there; the operator itself (`helm-operator run`) "
            "needs no checkout"
        )


def _pinned_versions() -> dict[str, str]:
    """Read the pins from the bootstrap script: one source of truth for versions."""
    pins: dict[str, str] = {}
    if BOOTSTRAP.exists():
        for m in re.finditer(r"^([A-Z0-9_]+)_VERSION=(\S+)$", BOOTSTRAP.read_text(), re.M):
            pins[m.group(1)] = m.group(2)
    return pins


def tools_dir() -> Path:
    return Path(os.environ.get("HELM_OPERATOR_TOOLS", Path.home() / ".cache/helm-operator/tools"))


@dataclass(frozen=True)
class Toolchain:
    """Absolute paths of every binary, resolved from env overrides or the bootstrap cache."""

    helm: Path
    helm3: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    etcd: Path
    kwok: Path
    kwokctl: Path
    kubelet: Path
    kube_proxy: Path
    coredns: Path
    sharder: Path  # the controller-sharding sharder (dynamic shards); its CRD beside it

    @property
    def controllerring_crd(self) -> Path:
        """The ControllerRing CRD of the sharder's module, as the bootstrap copied it."""
        return self.sharder.parent / "controllerrings-crd.yaml"

    @classmethod
    def discover(cls) -> Toolchain:
        require_checkout()
        pins = _pinned_versions()
        base = tools_dir()

        def comp(name: str, key: str) -> Path:
            return base / f"{name}-{pins.get(key, 'unknown')}"

        kube = Path(os.environ.get("HELM_OPERATOR_KUBE_DIR", comp("kubernetes", "KUBE")))
        kwok = Path(os.environ.get("HELM_OPERATOR_KWOK_DIR", comp("kwok", "KWOK")))
        kubenode = Path(os.environ.get("HELM_OPERATOR_KUBENODE_DIR", comp("kubenode", "KUBE")))
        return cls(
            helm=Path(os.environ.get("HELM_OPERATOR_HELM", comp("helm", "HELM4") / "helm")),
            helm3=Path(os.environ.get("HELM_OPERATOR_HELM3", comp("helm", "HELM3") / "helm")),
            kube_apiserver=kube / "kube-apiserver",
            kube_controller_manager=kube / "kube-controller-manager",
            kube_scheduler=kube / "kube-scheduler",
            kubectl=kube / "kubectl",
            etcd=Path(os.environ.get("HELM_OPERATOR_ETCD", comp("etcd", "ETCD") / "etcd")),
            kwok=kwok / "kwok",
            kwokctl=kwok / "kwokctl",
            kubelet=kubenode / "kubelet",
            kube_proxy=kubenode / "kube-proxy",
            coredns=Path(os.environ.get("HELM_OPERATOR_COREDNS", comp("coredns", "COREDNS") / "coredns")),
            sharder=Path(os.environ.get("HELM_OPERATOR_SHARDER_DIR", comp("sharder", "SHARDER"))) / "sharder",
        )

    @property
    def kube_version(self) -> str:
        return _pinned_versions().get("KUBE", "")

    @property
    def pins(self) -> dict[str, str]:
        """The versions tools/bootstrap builds, e.g. {"HELM4": "v4.3.1", "KUBE": "v1.36.3"}."""
        return _pinned_versions()

    def require(self, *names: str) -> None:
        """Fail with the list of missing binaries and the command that builds them."""
        missing = [f"{n} ({getattr(self, n)})" for n in names if not Path(getattr(self, n)).is_file()]
        if missing:
            raise ToolsMissing("missing binaries: " + ", ".join(missing) + f"; build them with: {BOOTSTRAP}")
