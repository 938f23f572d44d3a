"""Run the real operator as a separate process against the local cluster, and count its helm calls.

The operator is started exactly as a user starts it (``python -m helm_operator.cli run``) so that
SIGTERM/SIGKILL/restart behave as in production. Its ``--helm`` is a two-line shell wrapper that
appends each invocation to a log and then execs the real helm binary: the counting is real.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import yaml

from helm_operator.dev.devcluster import DevCluster

from . import pace
from .pace import within

REPO = Path(__file__).resolve().parents[2]


def shipped_watches() -> list[dict[str, Any]]:
    """The repository's watches.yaml with chart paths and hook files made absolute, for a copy
    written elsewhere (module-style hooks are left as they are)."""
    entries: list[dict[str, Any]] = yaml.safe_load((REPO / "watches.yaml").read_text())
    for entry in entries:
        entry["chart"] = str(REPO / entry["chart"])
        if str(entry.get("hooks", "")).endswith(".py"):
            entry["hooks"] = str(REPO / entry["hooks"])
    return entries


def free_port() -> int:
    """A port to listen on, below the kernel's ephemeral range: a port the kernel hands out (bind
    to 0) is also what it picks for outgoing connections, and one of the many kubectl, helm and
    client connections of a test run took it between this choice and the operator's bind."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        port = random.randrange(10000, max(low, 10001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between 10000 and {low}")


def metrics(port: int) -> dict[str, float]:
    """The operator's ``helm_operator_*`` samples, keyed by name with labels as exposed."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("helm_operator_") and " " in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def summed(port: int, metric: str, *within: str) -> float:
    """The sum of ``metric``'s samples whose labels contain every string of ``within``."""
    prefix = f"{metric}{{"
    return sum(v for k, v in metrics(port).items() if k.startswith(prefix) and all(w in k for w in within))


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    """An HTTP probe of the operator: status code and its JSON answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# What the suite retries inside a wait: a kubectl, helm or HTTP call that failed or timed out once
# (an API server slow under load, a metrics endpoint not yet bound). Assertion errors are not here:
# a check that asserts fails the wait at once.
class CallFailed(AssertionError):
    """A helm or kubectl call of the test's own failed: a failed assertion where a test makes it
    directly, a transient error inside a wait."""


TRANSIENT = (CallFailed, subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError, ValueError)


class Wait:
    """The wait in progress or last finished in this process: what it waited for and what it saw
    last (a failed test's diagnosis prints it)."""

    what = ""
    last: Any = None
    error = ""
    seconds = 0.0


def eventually(check: Callable[[], Any], timeout: float = 90, what: str = "", interval: float = 0.3) -> Any:
    """``check()``'s first truthy result before the deadline (``timeout`` on a quiet machine, scaled
    by this one's slowdown); a transient error of a call inside it is retried like a falsy result,
    and a timed-out wait says what it saw last and the last such error."""
    limit = within(timeout)
    began = time.monotonic()
    deadline = began + limit
    Wait.what, Wait.last, Wait.error = what or getattr(check, "__qualname__", repr(check)), None, ""
    while True:
        try:
            Wait.last = check()
        except TRANSIENT as exc:
            Wait.error = said(exc)
        else:
            if Wait.last:
                Wait.seconds = time.monotonic() - began
                return Wait.last
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    Wait.seconds = time.monotonic() - began
    error = f"; last error: {Wait.error}" if Wait.error else ""
    raise AssertionError(
        f"timed out after {limit:.0f}s ({timeout:.0f}s x slowdown {pace.FACTOR:.2f}) waiting for "
        f"{Wait.what}: last={Wait.last!r}{error}"
    )


def said(exc: BaseException) -> str:
    """One line of what a failed call said."""
    if isinstance(exc, subprocess.CalledProcessError):
        out = exc.stderr or exc.output or ""
        text = out.decode(errors="replace") if isinstance(out, bytes) else str(out)
        cmd = Path(str(exc.cmd[0] if isinstance(exc.cmd, list) else exc.cmd)).name
        return f"{cmd} exit {exc.returncode}: {' | '.join(text.strip().splitlines())[-300:]}"
    return f"{type(exc).__name__}: {str(exc)[-300:]}"


class OperatorProcess:
    def __init__(
        self,
        cluster: DevCluster,
        helm: Path,
        workdir: Path,
        watches: Path,
        namespaces: list[str],
        extra_args: list[str] | None = None,
        kubeconfig: Path | None = None,
        started: str = "Initial authentication has finished",
    ) -> None:
        self.cluster = cluster
        self.started = started  # the log line that says the process is up (a standby never logs in)
        self.kubeconfig = kubeconfig or cluster.kubeconfig
        self.workdir = workdir
        self.watches = watches
        self.namespaces = namespaces
        self.extra_args = extra_args or ["--retry-base", "1", "--retry-cap", "4"]
        if "--metrics-bind-address" not in self.extra_args:
            self.extra_args = [*self.extra_args, "--metrics-bind-address", f"127.0.0.1:{free_port()}"]
        address = self.extra_args[self.extra_args.index("--metrics-bind-address") + 1]
        self.metrics_port = int(address.rsplit(":", 1)[1])
        self.calls_log = workdir / "helm-calls.log"
        self.shim = workdir / "helm"
        self.shim.write_text(f'#!/bin/sh\necho "$*" >> "{self.calls_log}"\nexec "{helm}" "$@"\n')
        self.shim.chmod(0o755)
        self.calls_log.touch()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        OperatorProcess.seen.append(self)

    # Every operator this process made, in order: a failed test's diagnosis shows the logs of those
    # it started or that served it.
    seen: ClassVar[list[OperatorProcess]] = []

    @property
    def log_path(self) -> Path:
        return self.workdir / f"operator-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        cmd = [
            sys.executable,
            "-m",
            "helm_operator.cli",
            "run",
            "--watches-file",
            str(self.watches),
            "--kubeconfig",
            str(self.kubeconfig),
            "--helm",
            str(self.shim),
            *self.extra_args,
        ]
        for ns in self.namespaces:
            cmd += ["--namespace", ns]
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(self.workdir / "helm-cache"),
            "HELM_CONFIG_HOME": str(self.workdir / "helm-config"),
            "HELM_DATA_HOME": str(self.workdir / "helm-data"),
            "TINY_TAG": "2.0",
        }
        # Its own session: SIGKILL of the group kills helm children too, as when a Pod dies.
        self.proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        # Generous: a start is imports, chart loading and a login, and two suites share two cores.
        limit = within(90)
        deadline = time.monotonic() + limit
        while not (self.started in self.log() or self._died()):
            assert time.monotonic() < deadline, (
                f"no {self.started!r} after {limit:.0f} s; its log:\n{self.log()[-4000:]}"
            )
            time.sleep(0.3)
        assert not self._died(), f"operator exited at start:\n{self.log()}"

    def _died(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 150, group: bool = False) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            if group:
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        # Whatever it left running (helm children of a handler cut short) goes with it: the next
        # test must not meet a release written by a process that no longer exists.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc = None
        return rc

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def helm_calls(self) -> list[str]:
        return [line for line in self.calls_log.read_text().splitlines() if line.strip()]

    def resyncs(self, decided: str | None = None) -> float:
        """Resyncs the current process made (``decided``: "memory" or "read" only), as its metrics say."""
        label = f'decided="{decided}"' if decided else ""
        return summed(self.metrics_port, "helm_operator_resyncs_total", label)

    def handled(self, phrase: str) -> int:
        """How often the current process's log mentions ``phrase`` (e.g. a handler's success)."""
        return self.log().count(phrase)


class Resources:
    """kubectl conveniences for custom resources in one namespace."""

    def __init__(self, cluster: DevCluster, namespace: str) -> None:
        self.cluster = cluster
        self.ns = namespace

    def apply(self, doc: dict[str, Any], server_side: bool = False) -> None:
        doc = json.loads(json.dumps(doc))
        doc.setdefault("metadata", {})["namespace"] = self.ns
        flags = ["--server-side", "--field-manager=e2e"] if server_side else []
        self.cluster.kubectl("apply", *flags, "-f", "-", input=json.dumps(doc))

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        out = self.cluster.kubectl("get", kind, name, "-n", self.ns, "-o", "json", check=False)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def condition(
        self, kind: str, name: str, ctype: str, obj: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The condition ``ctype`` of the resource (of ``obj`` when the caller has just read it)."""
        obj = self.get(kind, name) or {} if obj is None else obj
        for c in (obj.get("status") or {}).get("conditions", []):
            if c["type"] == ctype:
                return dict(c)
        return {}

    def wait_condition(
        self,
        kind: str,
        name: str,
        ctype: str,
        status: str = "True",
        timeout: float = 120,
        generation: bool = True,
    ) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            obj = self.get(kind, name) or {}  # one read a look: the condition and the generation agree
            c = self.condition(kind, name, ctype, obj)
            if c.get("status") != status:
                return None
            if generation and c.get("observedGeneration") != obj.get("metadata", {}).get("generation"):
                return None
            return c

        result: dict[str, Any] = eventually(check, timeout, f"{kind}/{name} {ctype}={status}")
        return result

    def events(self, name: str) -> list[dict[str, Any]]:
        out = self.cluster.kubectl(
            "get", "events", "-n", self.ns, "--field-selector", f"involvedObject.name={name}", "-o", "json"
        )
        return list(json.loads(out.stdout)["items"])

    def wait_event(
        self, name: str, reason: str, needle: str = "", *, seen: int = 0, timeout: float = 30
    ) -> dict[str, Any]:
        """The latest ``reason`` Event of ``name`` whose message holds ``needle``, once there are
        more than ``seen`` of them. A turn writes its Events and its status at once, so an Event
        may land a moment after the condition a test waited for."""

        def check() -> dict[str, Any] | None:
            hits = [e for e in self.events(name) if e["reason"] == reason and needle in e["message"]]
            return hits[-1] if len(hits) > seen else None

        found: dict[str, Any] = eventually(check, timeout, f"{reason} event of {name} with {needle!r}")
        return found

    def delete(self, kind: str, name: str, wait: bool = True) -> None:
        self.cluster.kubectl("delete", kind, name, "-n", self.ns, f"--wait={str(wait).lower()}", timeout=180)

    def exists(self, kind: str, name: str) -> bool:
        return self.get(kind, name) is not None


def simple_crd(
    group: str, kind: str, plural: str, properties: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A namespaced v1 CRD with a status subresource: its spec free-form, or of these properties."""
    schema: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if properties:
        schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": properties}}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }
