"""The controller-sharding sharder beside a local control plane, for dynamic shards.

The sharder (github.com/timebertt/kubernetes-controller-sharding, built by ``tools/bootstrap``)
is a controller and a mutating webhook: it assigns each object of a ``ControllerRing``'s resources
to one of the ring's shards (a Lease each) by labelling it, and moves objects between shards with a
drain handshake. Here it runs as a process on this machine with the cluster's admin credentials; the
API server reaches its webhook on loopback, through a serving certificate made for 127.0.0.1 whose
CA the sharder writes into the webhook configurations it creates (``clientConfig.caBundle``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from helm_operator.dev.tools import Toolchain

WEBHOOK_PORT = 9443  # controller-runtime's webhook server port: the sharder's config has no field for it


class SharderError(RuntimeError):
    """The sharder did not start or did not become ready; says where its log is."""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def serving_certificate(folder: Path) -> bytes:
    """A CA and a certificate for 127.0.0.1 signed by it (``tls.crt``, ``tls.key``) in ``folder``;
    returns the CA certificate (PEM) the API server is to trust."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=sharder-ca",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=folder)  # fmt: skip
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", "tls.key", "-out", "tls.csr", cwd=folder)  # fmt: skip
    _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "san.cnf", "-out", "tls.crt", cwd=folder)  # fmt: skip
    return (folder / "ca.crt").read_bytes()


def sharder_config(cert_dir: Path, ca: bytes, health_port: int, sync_period: str = "30s") -> dict[str, Any]:
    """The sharder's ``SharderConfig``: no leader election (one sharder), its webhook on loopback."""
    return {
        "apiVersion": "config.sharding.timebertt.dev/v1alpha1",
        "kind": "SharderConfig",
        "leaderElection": {"leaderElect": False},
        "health": {"bindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "controller": {"sharder": {"syncPeriod": sync_period}},
        "webhook": {
            "server": {"certDir": str(cert_dir)},
            "config": {
                "clientConfig": {
                    "url": f"https://127.0.0.1:{WEBHOOK_PORT}/",
                    "caBundle": base64.b64encode(ca).decode(),
                }
            },
        },
    }


class Sharder:
    """One sharder process for a cluster (``kubeconfig``), its files under ``folder``."""

    def __init__(self, folder: Path, kubeconfig: Path, tools: Toolchain, health_port: int) -> None:
        self.folder, self.kubeconfig, self.tools, self.health_port = folder, kubeconfig, tools, health_port
        self.log_path = folder / "sharder.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def _kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        return subprocess.run(
            [str(self.tools.kubectl), *args], env=env, text=True, capture_output=True, check=True,
            timeout=120, input=input,
        )  # fmt: skip

    def start(self, timeout: float = 90.0) -> Sharder:
        self.tools.require("sharder", "kubectl")
        if not self.tools.controllerring_crd.is_file():
            raise SharderError(
                f"no ControllerRing CRD at {self.tools.controllerring_crd}: run tools/bootstrap sharder"
            )
        self._kubectl("apply", "--server-side", "-f", str(self.tools.controllerring_crd))
        self._kubectl("wait", "--for=condition=Established", "crd/controllerrings.sharding.timebertt.dev")
        certs = self.folder / "certs"
        ca = serving_certificate(certs)
        config = self.folder / "config.yaml"
        config.write_text(yaml.safe_dump(sharder_config(certs, ca, self.health_port)))
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        self.proc = subprocess.Popen(
            [str(self.tools.sharder), f"--config={config}", "--zap-log-level=debug"],
            env=env,
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SharderError(f"the sharder exited ({self.proc.returncode}); see {self.log_path}")
            if self.ready():
                return self
            time.sleep(0.5)
        self.stop()
        raise SharderError(f"the sharder was not ready within {timeout:.0f}s; see {self.log_path}")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def apply_ring(self, name: str, resources: list[dict[str, Any]], namespace: str | None = None) -> None:
        """A ``ControllerRing``: ``resources`` as the sharder's API spells them (group, resource,
        controlledResources); ``namespace``: only objects there are sharded."""
        spec: dict[str, Any] = {"resources": resources}
        if namespace:
            spec["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
        ring = {
            "apiVersion": "sharding.timebertt.dev/v1alpha1",
            "kind": "ControllerRing",
            "metadata": {"name": name},
            "spec": spec,
        }
        self._kubectl("apply", "-f", "-", input=json.dumps(ring))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None
