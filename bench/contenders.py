"""The three contenders, behind one small interface the scenarios drive.

- ``ours``: this project's operator, started as users start it (``python -m helm_operator.cli
  run``) with the pinned helm v4 behind a small shell wrapper that logs every invocation, from a
  virtualenv with its runtime dependencies only, as the image has them (see bench.runtime_env).
- ``helm`` (the floor): no operator at all, ``helm upgrade --install`` processes in a thread pool.
  Nothing can deploy a chart with the helm binary faster, so it is the reference for ratios.
- ``sdk`` (the peer): the Operator SDK's Helm operator, built from its Go module by bench.sdk.

All get the same chart, release names, values and concurrency C. Each works in its own namespace
with its own API group (see bench.workload), one contender at a time.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import yaml

from bench import profile, runtime_env, sdk, workload
from bench.cluster import BenchCluster
from bench.measure import own_cpu_seconds, parse_counter, tree_cpu_seconds
from helm_operator.adapters.helm import HELM_GO_ENV
from helm_operator.dev.tools import REPO_ROOT, Toolchain


class ContenderFailed(RuntimeError):
    """A contender did not start, crashed or did not converge; the message carries its log tail."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError:
        return 0, ""


class Submission:
    """Work handed to a contender in the background (CR writes, or helm processes for the floor)
    while the bench polls the cluster. Errors are collected, not raised, until :meth:`check`."""

    def __init__(self, work: Callable[[str], None], items: Iterable[str], workers: int) -> None:
        self.errors: list[str] = []
        self.finished_at: float | None = None
        self._items = list(items)
        self._work = work
        self._workers = workers
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-submit")
        self._thread.start()

    def _one(self, item: str) -> None:
        try:
            self._work(item)
        except Exception as exc:
            self.errors.append(f"{item}: {exc!s:.500}")

    def _run(self) -> None:
        with ThreadPoolExecutor(self._workers, thread_name_prefix="bench-submit") as pool:
            list(pool.map(self._one, self._items))
        self.finished_at = time.monotonic()

    def done(self) -> bool:
        return self.finished_at is not None

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def check(self) -> None:
        if self.errors:
            shown = "\n  ".join(self.errors[:5])
            raise ContenderFailed(f"{len(self.errors)} submissions failed, e.g.:\n  {shown}")


class Contender:
    """The interface the scenarios drive; defaults fit a contender without a process."""

    key: ClassVar[str]
    title: ClassVar[str]
    operator: ClassVar[bool] = True

    def __init__(self, cluster: BenchCluster, tools: Toolchain, root: Path, concurrency: int) -> None:
        self.cluster = cluster
        self.tools = tools
        self.concurrency = concurrency
        self.namespace = ""
        self.workdir = root  # replaced by a directory per namespace in begin()

    # -- once per run --------------------------------------------------------------------------
    def prepare(self, say: Callable[[str], None]) -> None:
        """Binaries and CRDs; called once before any N."""

    def versions(self) -> dict[str, str]:
        return {}

    def command(self) -> str:
        """How the contender is run, for the report."""
        return ""

    def dispose(self) -> None:
        """Remove what :meth:`prepare` created in the cluster."""

    # -- per N and repetition ------------------------------------------------------------------
    def begin(self, namespace: str, workdir: Path) -> None:
        self.namespace = namespace
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)

    def submit(self, names: list[str], wave: int) -> Submission:
        """Ask for ``wave`` (1: install, 2+: one value changed) of every release in ``names``."""
        raise NotImplementedError

    def reported(self, names: list[str], wave: int) -> int:
        """How many custom resources report success for ``wave`` (the floor has none)."""
        return len(names)

    def ready(self, names: list[str], wave: int) -> int | None:
        """How many custom resources also say their workloads are ready (None: no such status)."""
        return None

    def pid(self) -> int | None:
        return None

    def cpu_seconds(self) -> float | None:
        """Cumulative CPU seconds of the contender's process tree, reaped children included."""
        pid = self.pid()
        return tree_cpu_seconds(pid) if pid else None

    def own_cpu_seconds(self) -> float | None:
        """CPU seconds of the operator process alone (its helm children excluded); None for the
        floor, which has no process of its own."""
        pid = self.pid() if self.operator else None
        return own_cpu_seconds(pid) if pid else None

    def helm_log(self) -> list[str] | None:
        """The arguments of every helm process started so far, where countable."""
        return None

    def reconciles(self) -> int | None:
        """Reconciles the operator has run so far (where it exposes a count)."""
        return None

    def helm_parent(self) -> int | None:
        """The process whose helm children show how many releases are worked on in parallel."""
        return None

    def helm_calls(self) -> int | None:
        log = self.helm_log()
        return None if log is None else len(log)

    def start(self) -> None:
        """Start the operator; returns once the process is up (see :meth:`resumed` for ready)."""

    def stop(self) -> None:
        pass

    def resumed(self, names: list[str]) -> bool | None:
        """After a restart: has every CR been handled by the new process? (None: not applicable)"""
        return None

    def log_tail(self, lines: int = 25) -> str:
        return ""

    def end(self) -> None:
        """Stop and let the namespace go (the bench deletes it)."""
        self.stop()


class HelmFloor(Contender):
    key = "helm"
    title = "helm (floor)"
    operator = False
    flags: ClassVar[tuple[str, ...]] = ()  # added to every helm upgrade --install
    go_env: ClassVar[dict[str, str]] = {}  # the Go runtime settings of its helm processes

    def __init__(self, cluster: BenchCluster, tools: Toolchain, root: Path, concurrency: int) -> None:
        super().__init__(cluster, tools, root, concurrency)
        self._cpu = 0.0
        self._calls: list[str] = []
        self._lock = threading.Lock()

    def command(self) -> str:
        flags = "".join(f" {f}" for f in self.flags)
        env = "".join(f"{k}={v} " for k, v in self.go_env.items())
        chart = rel(workload.CHART)
        return (
            f"`{env}helm upgrade --install NAME {chart} --namespace NS --values wave.yaml{flags}` "
            f"x N in a pool of {self.concurrency} threads"
        )

    def versions(self) -> dict[str, str]:
        return {"helm": helm_version(self.tools.helm)}

    def submit(self, names: list[str], wave: int) -> Submission:
        values = self.workdir / f"values-wave-{wave}.yaml"
        values.write_text(yaml.safe_dump(workload.values(wave)))
        env = {**self.cluster.dev.env, **helm_homes(self.workdir), **self.go_env}
        cmd = [str(self.tools.helm), "upgrade", "--install"]

        def one(name: str) -> None:
            args = [*cmd, name, str(workload.CHART), "--namespace", self.namespace, "--values", str(values)]
            args += self.flags
            with (self.workdir / "helm.log").open("ab") as out:
                proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
                # wait4 gives this child's own rusage: CPU of exactly the helm processes.
                _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
            with self._lock:
                self._cpu += usage.ru_utime + usage.ru_stime
                self._calls.append(" ".join(args[1:4]))
            if proc.returncode != 0:
                raise ContenderFailed(f"helm exited {proc.returncode}; see {self.workdir / 'helm.log'}")

        return Submission(one, names, self.concurrency)

    def cpu_seconds(self) -> float | None:
        with self._lock:
            return self._cpu

    def helm_parent(self) -> int | None:
        return os.getpid()  # the pool's helm processes are the bench's own children

    def helm_log(self) -> list[str] | None:
        with self._lock:
            return list(self._calls)

    def log_tail(self, lines: int = 25) -> str:
        return tail(self.workdir / "helm.log", lines)


class HelmLean(HelmFloor):
    """Plain helm run as ours runs it: the flag ours passes for releases Helm 4 applies
    server-side (Helm's client-side OpenAPI check left to the API server's strict field
    validation) and the Go runtime settings ours gives its helm processes. Against it, the ratio
    is the operator's own overhead; against the floor, what a user of plain helm gets."""

    key = "helm-lean"
    title = "helm, as ours runs it"
    flags = ("--disable-openapi-validation",)
    go_env = HELM_GO_ENV


class OperatorContender(Contender):
    """Common parts of the two operators: a process in its own session, CRs written from a pool."""

    _proc: subprocess.Popen[bytes] | None = None
    starts = 0

    def prepare(self, say: Callable[[str], None]) -> None:
        self.cluster.apply_crd(workload.crd(self.key))

    def dispose(self) -> None:
        self.cluster.delete_crd(f"{workload.PLURAL}.{workload.group(self.key)}")

    @property
    def group(self) -> str:
        return workload.group(self.key)

    def submit(self, names: list[str], wave: int) -> Submission:
        custom = self.cluster.custom

        def one(name: str) -> None:
            if wave == 1:
                body = workload.custom_resource(self.key, name, wave)
                custom.create_namespaced_custom_object(
                    self.group, workload.VERSION, self.namespace, workload.PLURAL, body
                )
            else:
                custom.patch_namespaced_custom_object(
                    self.group,
                    workload.VERSION,
                    self.namespace,
                    workload.PLURAL,
                    name,
                    {"spec": workload.values(wave)},
                )

        return Submission(one, names, max(8, self.concurrency))

    def list_crs(self) -> list[dict[str, Any]]:
        listing = self.cluster.custom.list_namespaced_custom_object(
            self.group, workload.VERSION, self.namespace, workload.PLURAL
        )
        return list(listing.get("items") or [])

    def pid(self) -> int | None:
        return self._proc.pid if self._proc and self._proc.poll() is None else None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.key}-{self.starts}.log"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 25) -> str:
        return tail(self.log_path, lines)

    def _spawn(self, cmd: list[str], env: dict[str, str], ready: Callable[[], bool], timeout: float) -> None:
        self.starts += 1
        with self.log_path.open("wb") as out:
            self._proc = subprocess.Popen(
                cmd, cwd=self.workdir, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ContenderFailed(
                    f"{self.key} exited with {self._proc.returncode} at start:\n{self.log_tail()}"
                )
            if ready():
                return
            time.sleep(0.1)
        raise ContenderFailed(f"{self.key} not ready {timeout:.0f}s after start:\n{self.log_tail()}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def end(self) -> None:
        self.stop()
        if self.namespace:
            self.cluster.strip_finalizers(self.group, workload.VERSION, workload.PLURAL, self.namespace)


class Ours(OperatorContender):
    key = "ours"
    title = "ours"

    def __init__(self, cluster: BenchCluster, tools: Toolchain, root: Path, concurrency: int) -> None:
        super().__init__(cluster, tools, root, concurrency)
        self.port = 0
        self.profiles: Path | None = None  # set: py-spy samples every start into this folder
        self._spy: subprocess.Popen[bytes] | None = None
        self.python = sys.executable  # replaced in prepare() by the runtime-only virtualenv's

    def prepare(self, say: Callable[[str], None]) -> None:
        self.python = runtime_env.python(say)
        super().prepare(say)

    def command(self) -> str:
        return (
            "`python -m helm_operator.cli run --watches-file watches.yaml --helm <helm v4 wrapper> "
            f"--max-helm-processes {self.concurrency} --namespace NS --health-probe-bind-address "
            f"127.0.0.1:PORT` (watch: `maxConcurrentReconciles: {self.concurrency}`, `wait: false`), "
            "from a virtualenv with the runtime dependencies only, at the versions below"
        )

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {
            "helm-operator": f"{version('helm-operator')} ({git_describe()})",
            "kopf": version("kopf"),
            "pyhelm3": version("pyhelm3"),
            "kubernetes (python client)": version("kubernetes"),
        }

    def begin(self, namespace: str, workdir: Path) -> None:
        super().begin(namespace, workdir)
        self.calls_log = workdir / "helm-calls.log"
        self.calls_log.touch()
        self.shim = workdir / "helm"
        self.shim.write_text(f'#!/bin/sh\necho "$*" >> "{self.calls_log}"\nexec "{self.tools.helm}" "$@"\n')
        self.shim.chmod(0o755)
        self.watches = workdir / "watches.yaml"
        entry = {
            "group": self.group,
            "version": workload.VERSION,
            "kind": workload.KIND,
            "chart": str(workload.CHART),
            "maxConcurrentReconciles": self.concurrency,
            "wait": False,
        }
        self.watches.write_text(yaml.safe_dump([entry], sort_keys=False))

    def start(self) -> None:
        self.port = free_port()
        cmd = [
            self.python,
            "-m",
            "helm_operator.cli",
            "run",
            "--watches-file",
            str(self.watches),
            "--kubeconfig",
            str(self.cluster.kubeconfig),
            "--helm",
            str(self.shim),
            "--max-helm-processes",
            str(self.concurrency),
            "--namespace",
            self.namespace,
            "--health-probe-bind-address",
            f"127.0.0.1:{self.port}",
        ]
        env = {**os.environ, **helm_homes(self.workdir), "PYTHONPATH": str(REPO_ROOT)}
        # Up when the probe server answers at all; ready (see resumed) is a later state.
        self._spawn(cmd, env, lambda: self._readyz() != 0, timeout=60)
        if self.profiles is not None and self.pid() is not None:
            self.profiles.mkdir(parents=True, exist_ok=True)
            out = self.profiles / f"{self.namespace}-{self.starts}.txt"
            self._spy = profile.record(int(self.pid() or 0), out)

    def stop(self) -> None:
        spy, self._spy = self._spy, None
        if spy is not None:
            profile.finish(spy)
        super().stop()

    def _readyz(self) -> int:
        return http_get(f"http://127.0.0.1:{self.port}/readyz")[0]

    def resumed(self, names: list[str]) -> bool | None:
        """/readyz answers 200 once every CR of the process's first listing has been handled."""
        return self._readyz() == 200

    def reported(self, names: list[str], wave: int) -> int:
        return sum(1 for cr in self.list_crs() if workload.ours_reports_success(cr))

    def ready(self, names: list[str], wave: int) -> int | None:
        return sum(1 for cr in self.list_crs() if workload.ours_reports_ready(cr))

    def helm_log(self) -> list[str] | None:
        return [line for line in self.calls_log.read_text().splitlines() if line.strip()]

    def helm_parent(self) -> int | None:
        return self.pid()


class Sdk(OperatorContender):
    key = "sdk"
    title = f"Operator SDK {sdk.SDK_VERSION}"

    def __init__(self, cluster: BenchCluster, tools: Toolchain, root: Path, concurrency: int) -> None:
        super().__init__(cluster, tools, root, concurrency)
        self.binary = sdk.binary()
        self.metrics_port = 0
        self._log_offset = 0

    def prepare(self, say: Callable[[str], None]) -> None:
        self.binary = sdk.ensure_built(say)
        super().prepare(say)

    def command(self) -> str:
        return (
            f"`helm-operator run --watches-file watches.yaml --max-concurrent-reconciles {self.concurrency} "
            "--metrics-bind-address 127.0.0.1:PORT --health-probe-bind-address 0 --leader-elect=false` "
            "with `WATCH_NAMESPACE=NS` (default reconcile period 1m, dependent watches on)"
        )

    def versions(self) -> dict[str, str]:
        return {"operator-sdk helm-operator": sdk.version_line(self.binary)}

    def begin(self, namespace: str, workdir: Path) -> None:
        super().begin(namespace, workdir)
        self.watches = workdir / "watches.yaml"
        entry = {
            "group": self.group,
            "version": workload.VERSION,
            "kind": workload.KIND,
            "chart": str(workload.CHART),
        }
        self.watches.write_text(yaml.safe_dump([entry], sort_keys=False))

    def start(self) -> None:
        self.metrics_port = free_port()
        cmd = [
            str(self.binary),
            "run",
            "--watches-file",
            str(self.watches),
            "--max-concurrent-reconciles",
            str(self.concurrency),
            "--metrics-bind-address",
            f"127.0.0.1:{self.metrics_port}",
            "--health-probe-bind-address",
            "0",
            "--leader-elect=false",
        ]
        env = {
            **os.environ,
            **helm_homes(self.workdir),
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "WATCH_NAMESPACE": self.namespace,
        }
        self._spawn(cmd, env, lambda: "Starting workers" in self.log_text(), timeout=60)

    def reported(self, names: list[str], wave: int) -> int:
        return sum(1 for cr in self.list_crs() if workload.sdk_reports_success(cr, wave))

    def reconciles(self) -> int | None:
        """controller-runtime's reconcile counter: each SDK reconcile renders the chart and runs an
        in-process dry-run upgrade, the analogue of a helm process for ours."""
        status, text = http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        value = parse_counter(text, "controller_runtime_reconcile_total") if status == 200 else None
        return None if value is None else int(value)

    def resumed(self, names: list[str]) -> bool | None:
        """Every CR has a "Reconciled release" line in the new process's log (the SDK has no
        readiness that waits for its custom resources)."""
        return set(names) <= reconciled_releases(self.log_text())


def reconciled_releases(log: str) -> set[str]:
    """Releases the SDK logged "Reconciled release" (or installed/upgraded) for; its log is JSON
    lines from zap with the release name in ``release``."""
    done = set()
    for line in log.splitlines():
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        done_msg = entry.get("msg") in ("Reconciled release", "Installed release", "Upgraded release")
        if done_msg and entry.get("release"):
            done.add(str(entry["release"]))
    return done


CONTENDERS: dict[str, type[Contender]] = {c.key: c for c in (Ours, HelmFloor, HelmLean, Sdk)}


def helm_homes(workdir: Path) -> dict[str, str]:
    """Private Helm cache/config/data dirs, so no contender reads another's (or the user's)."""
    return {f"HELM_{k}_HOME": str(workdir / f"helm-{k.lower()}") for k in ("CACHE", "CONFIG", "DATA")}


def helm_version(helm: Path) -> str:
    out = subprocess.run([str(helm), "version", "--short"], capture_output=True, text=True, timeout=30)
    return out.stdout.strip() or out.stderr.strip()


def git_describe() -> str:
    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)
        return out.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return f"commit {commit}{' + uncommitted changes' if dirty else ''}"


def rel(path: Path) -> str:
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def tail(path: Path, lines: int, width: int = 300) -> str:
    """The last lines of a log, each cut to ``width`` characters (helm command lines are long)."""
    if not path.exists():
        return ""
    last = path.read_text(errors="replace").splitlines()[-lines:]
    return "\n".join(line if len(line) <= width else line[:width] + " ..." for line in last)
