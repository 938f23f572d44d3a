"""A thin adapter over pyhelm3's command layer: one client, our flags, error mapping, a process cap.

pyhelm3 builds and runs the ``helm`` command lines; we extend it (not fork it) with the flags it
lacks (``--labels``, a per-call ``--history-max`` replacing its fixed one, ``--post-renderer``) by
adding them in ``run`` from a context variable, so its own argument building and JSON parsing stay
in use.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyhelm3 import Command, errors

from helm_operator.adapters import postrender
from helm_operator.adapters.metrics import HELM_ACTION_DURATION, HELM_PROCESSES, HELM_QUEUE
from helm_operator.config.charts import ChartRef
from helm_operator.config.sharding import SHARD_LABEL
from helm_operator.core.lease import Gate, open_gate
from helm_operator.core.locks import Slots
from helm_operator.core.masking import mask
from helm_operator.core.naming import OWNER_LABEL
from helm_operator.core.tenancy import NOT_ENFORCED, TenantRules
from helm_operator.core.vocabulary import Reason
from helm_operator.release import conflicts
from helm_operator.release.record import ObjectId

log = logging.getLogger(__name__)

_extra_args: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("helm_extra_args", default=())


class HelmError(RuntimeError):
    """A failed helm command, classified; ``message`` is safe to show (secrets masked)."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


# Failures that retrying cannot fix: the same chart and values fail the same way.
PERMANENT_REASONS = frozenset(
    {
        Reason.RENDER_FAILED,
        Reason.NAMESPACE_VIOLATION,
        Reason.CLUSTER_SCOPED_NOT_ALLOWED,
        Reason.RELEASE_TOO_LARGE,
        Reason.OWNERSHIP_CONFLICT,
        Reason.FIELD_CONFLICT,  # once the drift rules have taken back what they may
    }
)
# What our post-renderer refuses by the tenant rules (``helm-operator: <reason>: …`` lines).
TENANT_REASONS = (Reason.NAMESPACE_VIOLATION, Reason.CLUSTER_SCOPED_NOT_ALLOWED)

# A render problem cites a chart template by file and line ("mychart/templates/cm.yaml:6:15"),
# whatever Helm's major version says around it; the markers catch the rest.
_TEMPLATE_POSITION = re.compile(r"/templates/[^\s:]+:\d+")
_RENDER_MARKERS = (
    "parse error",
    "template:",
    'executing "',
    "yaml parse error",
    "execution error",
    "failed to render chart",
    "error converting yaml to json",
    "error validating data",
    "yaml: line",
)


def said(text: str) -> str:
    """Helm's error without its log lines: Helm 4 logs an error (``level=WARN msg=…``) before it
    prints it again as ``Error: …``; the message keeps the second, once."""
    lines = text.splitlines()
    last = max((i for i, line in enumerate(lines) if line.startswith("Error: ")), default=None)
    return text if last is None else "\n".join(lines[last:]).removeprefix("Error: ")


def classify(text: str, exc: errors.Error | None = None) -> Reason:
    """Why helm failed, from what it printed (Helm 3 and 4 word things differently)."""
    low = text.lower()
    for reason in TENANT_REASONS:
        if f"helm-operator: {reason}:" in text:
            return reason
    if "because it is being terminated" in low:  # the API server: no new objects in a namespace going away
        return Reason.CANCELLED
    if "invalid ownership metadata" in low or "cannot be imported into the current release" in low:
        return Reason.OWNERSHIP_CONFLICT
    if "too long: must have at most 1048576 bytes" in low or "request entity too large" in low:
        return Reason.RELEASE_TOO_LARGE
    if conflicts.is_conflict(text):
        return Reason.FIELD_CONFLICT
    if "no matches for kind" in low or "resource mapping not found" in low:
        return Reason.KIND_NOT_SERVED  # e.g. a CRD another release installs: may appear, so retried
    rendered = any(m in low for m in _RENDER_MARKERS) or _TEMPLATE_POSITION.search(text)
    if isinstance(exc, errors.FailedToRenderChartError) or rendered:
        return Reason.RENDER_FAILED
    if "timed out" in low or "context deadline exceeded" in low:
        return Reason.TIMEOUT
    if isinstance(exc, errors.CommandCancelledError) or "context canceled" in low:
        return Reason.CANCELLED
    if isinstance(exc, errors.ConnectionError):
        return Reason.CONNECTION_FAILED
    if "another operation" in low:
        return Reason.LOCKED
    return Reason.HELM_FAILED


_VERDICT = re.compile(rf"helm-operator: ((?:{'|'.join(TENANT_REASONS)}): [^\n]*)")


def tenant_message(text: str) -> str:
    """Only our post-renderer's verdict lines, without Helm's wrapping of them."""
    return "; ".join(dict.fromkeys(_VERDICT.findall(text))) or text


# Helm: `ClusterRole "x" in namespace "" exists and cannot be imported into the current release:
# invalid ownership metadata; annotation validation error: key "meta.helm.sh/release-name" must
# equal "a": current value is "b"` (the first key that differs).
_CONFLICT_OBJECT = re.compile(r'(\w+) "([^"]+)" in namespace "([^"]*)" exists and cannot be imported')
_CONFLICT_KEY = re.compile(r'key "([^"]+)" must equal "([^"]*)": current value is "([^"]*)"')


def ownership_message(text: str) -> str:
    """Which object another release owns, and whose it is, from Helm's refusal to adopt it."""
    obj, key = _CONFLICT_OBJECT.search(text), _CONFLICT_KEY.search(text)
    if obj is None:
        return text
    kind, name, ns = obj.groups()
    what = f"{kind} {ns + '/' if ns else ''}{name}"
    owner = "another Helm release (or none: it was not made by Helm)"
    if key is not None and key.group(1).endswith("release-name"):
        owner = f"Helm release {key.group(3)!r}"
    elif key is not None and key.group(1).endswith("release-namespace"):
        owner = f"the Helm release of this name in namespace {key.group(3)!r}"
    return (
        f"{what} already exists and belongs to {owner}; delete it or uninstall that release, then "
        f"annotate this resource helm-operator.io/retry=<a new value> to try again"
    )


class _Command(Command):  # type: ignore[misc]
    """pyhelm3's Command with the extra flags of the current call appended."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.invocations = 0

    async def run(self, command: list[Any], input: bytes | None = None) -> bytes:
        self.invocations += 1
        HELM_PROCESSES.labels(command=command[0] if command else "").inc()
        extra = _extra_args.get()
        if "--history-max" in extra and "--history-max" in command:
            i = command.index("--history-max")  # pyhelm3's own default; ours is per call
            command = command[:i] + command[i + 2 :]
        result: bytes = await super().run([*command, *extra], input)
        return result


@contextlib.contextmanager
def _with_args(args: Sequence[str]) -> Iterator[None]:
    token = _extra_args.set(tuple(args))
    try:
        yield
    finally:
        _extra_args.reset(token)


# The Go runtime settings of the operator's helm processes, unless its own environment sets them.
# Parallelism comes from several helm processes, each mostly waiting on the API server: one
# scheduler thread each spares the runtime's idle spinning and parallel GC handoffs, and a GC
# every tripled (not doubled) heap halves the collections of a process that lives a second. Both
# together: 12-18 % less CPU per `helm upgrade --install` at 8 in parallel on 2 cores, for 1-2 MiB
# more memory per process (measured with the bench's chart).
HELM_GO_ENV = {"GOMAXPROCS": "1", "GOGC": "200"}


@dataclass(frozen=True)
class HelmSettings:
    executable: str = "helm"
    kubeconfig: Path | None = None
    max_processes: int = 4
    shutdown_grace: float = 120.0
    workdir: Path | None = None  # where the post-renderer and helm's wrapper live; None: no post-renderer
    chart_cache: Path = Path.home() / ".cache/helm-operator/charts"  # pulled remote charts


@dataclass(frozen=True)
class Rendered:
    """A release rendered by a dry-run: its objects (post-rendered) and its Helm hooks."""

    manifest: str  # YAML stream of the objects Helm applies
    hooks: tuple[Mapping[str, Any], ...] = ()  # Helm's hook records: kind, name, events, manifest


@dataclass(frozen=True)
class Applied:
    """What ``helm upgrade --install`` did: the release as it printed it (empty: it printed none)
    and the objects its manifest holds, named by our post-renderer (None: not served by it)."""

    printed: Mapping[str, Any]
    objects: tuple[ObjectId, ...] | None = None


class HelmAborted(RuntimeError):
    """The action was stopped on purpose (its resource is being deleted)."""


class Helm:
    """Every ``helm`` process the operator starts goes through here (and is capped and counted).

    ``gate`` is asked before each process starts (and before a post-render is answered): with
    leader election, whether this replica still holds its lease (see ``runtime/fence.py``)."""

    def __init__(self, settings: HelmSettings, gate: Gate = open_gate) -> None:
        self.settings = settings
        self._gate = gate
        settings.chart_cache.mkdir(parents=True, exist_ok=True)
        self._cmd = self._command(settings.executable)
        self._slots = Slots(settings.max_processes)
        HELM_QUEUE.set_function(lambda: self._slots.waiting)
        self._postrender_ready = False
        self._major: int | None = None  # helm's major version, learnt with the post-renderer's layout
        self._scopes_written: dict[str, bool] | None = None  # what the post-renderer's scopes file holds
        self._postrender_lock = asyncio.Lock()

    def _command(self, executable: str) -> _Command:
        return _Command(
            executable=executable,
            kubeconfig=self.settings.kubeconfig,
            unpack_directory=str(self.settings.chart_cache),
        )

    async def _prepare_postrender(self) -> bool:
        """Lay out the post-renderer once, on the first install/upgrade (not at start-up: a restart
        with nothing to do must not start helm).

        Helm 4 finds it as a plugin through ``HELM_PLUGINS``, Helm 3 on ``PATH``: a small wrapper
        sets exactly that for helm's own processes and execs the real binary, so the operator's
        environment is never changed for helm's benefit.
        """
        workdir = self.settings.workdir
        if workdir is None:
            return False
        async with self._postrender_lock:  # the first installs arrive together: lay it out once
            if not self._postrender_ready:
                await self._lay_out_postrender(workdir)
        return True

    async def _lay_out_postrender(self, workdir: Path) -> None:
        self._gate("helm version")
        HELM_PROCESSES.labels(command="version").inc()
        major = (await asyncio.to_thread(self._cmd.client_version)).major
        self._major = major
        postrender.install(workdir)
        real = shutil.which(self.settings.executable) or self.settings.executable
        env = [f'PATH="{workdir / "bin"}:$PATH"']
        if major >= 4:
            env.append(f'HELM_PLUGINS="{workdir / "plugins"}"')
        env += [f'{k}="${{{k}:-{v}}}"' for k, v in HELM_GO_ENV.items()]  # unless the operator's says
        wrapper = workdir / "helm"
        wrapper.write_text(f'#!/bin/sh\nexport {" ".join(env)}\nexec "{real}" "$@"\n')
        wrapper.chmod(0o755)
        invocations = self._cmd.invocations
        self._cmd = self._command(str(wrapper))
        self._cmd.invocations = invocations
        self._postrender_ready = True

    @property
    def invocations(self) -> int:
        return int(self._cmd.invocations)

    async def _call(
        self,
        action: str,
        values: Any,
        extra: Sequence[str],
        coro_factory: Any,
        abort: asyncio.Event | None = None,
        needles: Sequence[str] = (),
        exchange: postrender.Exchange | None = None,
    ) -> Any:
        self._gate(f"helm {action}")
        async with self._slots.hold(), exchange.serving() if exchange else contextlib.nullcontext():
            self._gate(f"helm {action}")  # again: the wait for a slot may have been long
            started = time.monotonic()
            try:
                with _with_args(extra):
                    task = asyncio.ensure_future(coro_factory())  # copies the context: extra args
                try:
                    if abort is not None:
                        await _until_done_or(task, abort, needles)
                    return await asyncio.shield(task)
                except asyncio.CancelledError:
                    # Shutting down: let helm finish its action rather than leave it pending-*.
                    with contextlib.suppress(BaseException):
                        await asyncio.wait_for(asyncio.shield(task), self.settings.shutdown_grace)
                    raise
            except errors.Error as exc:
                text = said(exc.stderr.decode(errors="replace").strip() if exc.stderr else str(exc))
                reason = classify(text, exc)
                if reason in TENANT_REASONS:
                    text = tenant_message(text)
                elif reason is Reason.OWNERSHIP_CONFLICT:
                    text = ownership_message(text)
                raise HelmError(reason, mask(text, values)) from None
            finally:
                HELM_ACTION_DURATION.labels(action=action).observe(time.monotonic() - started)

    async def install_or_upgrade(
        self,
        name: str,
        namespace: str,
        chart: ChartRef,
        values: Mapping[str, Any],
        *,
        labels: Mapping[str, str],
        timeout: float,
        wait: bool,
        history_max: int,
        owner_ref: Mapping[str, Any] | None = None,
        scopes: Mapping[str, bool] | None = None,
        tenant: TenantRules = NOT_ENFORCED,
        abort: asyncio.Event | None = None,
        dry_run: bool = False,
        server_side: bool = False,
        unset_labels: Sequence[str] = (),
    ) -> Applied:
        """``helm upgrade --install``; ``abort`` set while it runs stops helm (SIGTERM) at once.
        ``dry_run``: ``--dry-run=server``, nothing is stored or applied (see :meth:`render`).
        ``labels`` label the release record (Helm merges them into the previous revision's, less
        ``unset_labels``); the shard's (``SHARD_LABEL``) labels every rendered object too.

        ``server_side``: Helm will apply the release server-side (a new release, or one made so).
        Helm 4 then asks the API server for strict field validation of every object it applies,
        which rejects exactly what its client-side OpenAPI check would, so that check (it fetches
        and parses the API's OpenAPI documents: most of a helm process's CPU) is skipped."""
        extra = ["--history-max", str(history_max)]
        if dry_run:
            extra.append("--dry-run=server")
        if labels or unset_labels:
            pairs = [f"{k}={v}" for k, v in labels.items()] + [f"{k}=null" for k in unset_labels]
            extra += ["--labels", ",".join(pairs)]
        exchange = None
        postrender_ready = await self._prepare_postrender()
        if server_side and not dry_run and (self._major or 0) >= 4:
            extra.append("--disable-openapi-validation")
        if postrender_ready:
            workdir = self.settings.workdir
            assert workdir is not None
            scopes_file = None
            if scopes is not None:
                scopes_file = workdir / "scopes.json"
                if scopes != self._scopes_written:
                    tmp = scopes_file.with_suffix(f".{os.getpid()}.tmp")
                    tmp.write_text(json.dumps(scopes, sort_keys=True))
                    tmp.replace(scopes_file)
                    self._scopes_written = dict(scopes)
            argv = postrender.argv_for(
                labels[OWNER_LABEL], owner_ref, namespace, scopes_file, tenant, labels.get(SHARD_LABEL)
            )
            exchange = postrender.Exchange(workdir / "calls", argv, gate=self._gate)
            extra += postrender.flags_for(argv, exchange)
        chart_ref: Path | str = chart.path if chart.path is not None else chart.ref

        async def go() -> Any:
            try:
                return await self._cmd.install_or_upgrade(
                    name,
                    chart_ref,
                    dict(values),
                    namespace=namespace,
                    create_namespace=False,
                    timeout=f"{int(timeout)}s",
                    wait=wait,
                    version=None if chart.path else chart.version,  # a local path is the version
                    repo=None if chart.path else chart.repo,
                    # The release is exactly chart defaults ◄ these values: given none, Helm
                    # would otherwise reuse the previous revision's (a spec emptied to `{}`).
                    reset_values=True,
                    # Helm installs a chart's crds/ before rendering, out of the post-renderer's
                    # sight: where the tenant rules forbid cluster-scoped objects, never.
                    skip_crds=tenant.enforce and not tenant.allow_cluster_scoped,
                )
            except ValueError:  # exit 0 without a release on stdout: the caller reads the storage
                if dry_run:
                    raise HelmError(Reason.RENDER_FAILED, "helm printed no release for the dry run") from None
                log.warning("helm upgrade %s printed no release", name)
                return {}

        needles = ("upgrade", name, "--namespace", namespace)
        action = "render" if dry_run else "upgrade"
        try:
            result: dict[str, Any] = await self._call(action, values, extra, go, abort, needles, exchange)
        except HelmError as exc:
            # The post-renderer refused objects: its own words (Helm 4 does not pass them on).
            if exchange is not None and exchange.verdict:
                raise HelmError(classify(exchange.verdict), tenant_message(exchange.verdict)) from exc
            raise
        return Applied(result, exchange.objects if exchange is not None else None)

    async def render(
        self,
        name: str,
        namespace: str,
        chart: ChartRef,
        values: Mapping[str, Any],
        *,
        labels: Mapping[str, str],
        timeout: float,
        history_max: int,
        owner_ref: Mapping[str, Any] | None = None,
        scopes: Mapping[str, bool] | None = None,
        tenant: TenantRules = NOT_ENFORCED,
    ) -> Rendered:
        """What :meth:`install_or_upgrade` would make of the release, without making it: the same
        command line, flags and post-renderer, run with ``--dry-run=server`` (templates see the
        cluster, ``lookup`` works, install vs upgrade is decided as for real; nothing is stored)."""
        applied = await self.install_or_upgrade(
            name,
            namespace,
            chart,
            values,
            labels=labels,
            timeout=timeout,
            wait=False,
            history_max=history_max,
            owner_ref=owner_ref,
            scopes=scopes,
            tenant=tenant,
            dry_run=True,
        )
        result = applied.printed
        hooks = tuple(h for h in result.get("hooks") or () if isinstance(h, Mapping))
        return Rendered(str(result.get("manifest") or ""), hooks)

    async def pull(self, chart: ChartRef) -> Path:
        """A remote chart (pinned version) as a local directory, pulled once and kept on disk."""
        key = hashlib.sha256(f"{chart.ref}|{chart.repo or ''}|{chart.version or ''}".encode()).hexdigest()[
            :16
        ]
        final = self.settings.chart_cache / key
        found = [p for p in final.iterdir() if (p / "Chart.yaml").is_file()] if final.is_dir() else []
        if found:
            return found[0]
        self.settings.chart_cache.mkdir(parents=True, exist_ok=True)

        async def go() -> Any:
            return await self._cmd.pull(chart.ref, repo=chart.repo, version=chart.version)

        unpacked: Path = await self._call("pull", {}, [], go)
        if final.exists():  # pulled concurrently by another reconcile
            shutil.rmtree(unpacked, ignore_errors=True)
        else:
            unpacked.rename(final)
        return next(p for p in final.iterdir() if (p / "Chart.yaml").is_file())

    async def rollback(
        self, name: str, namespace: str, revision: int | None, *, timeout: float, wait: bool, history_max: int
    ) -> None:
        async def go() -> Any:
            return await self._cmd.rollback(
                name, revision, namespace=namespace, timeout=f"{int(timeout)}s", wait=wait
            )

        await self._call("rollback", {}, ["--history-max", str(history_max)], go)

    async def test(self, name: str, namespace: str, *, timeout: float) -> str:
        """``helm test``: run the release's test hooks (pyhelm3 has no verb for it); what helm
        printed, or ``HelmError`` when a test failed."""

        async def go() -> Any:
            return await self._cmd.run(
                ["test", name, "--namespace", namespace, "--timeout", f"{int(timeout)}s"]
            )

        out: bytes = await self._call("test", {}, [], go)
        return out.decode(errors="replace")

    async def uninstall(self, name: str, namespace: str, *, timeout: float, wait: bool) -> bool:
        """Uninstall the release: True when Helm did, False when it found no record of it (gone
        already, or deleted meanwhile: Helm then deleted none of its objects)."""

        async def go() -> Any:
            return await self._cmd.uninstall(name, namespace=namespace, timeout=f"{int(timeout)}s", wait=wait)

        try:
            await self._call("uninstall", {}, [], go)
        except HelmError as exc:
            if "not found" not in exc.message:
                raise
            return False
        return True


def _helm_processes(argv_needles: Sequence[str]) -> list[int]:
    """PIDs of helm processes started by this operator whose arguments contain all the needles.

    pyhelm3 runs helm through ``sh -c``, and cancelling its task signals only that shell; helm
    itself must be signalled to stop (it then marks its release failed and exits).
    """
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv]
        if all(n in words for n in argv_needles) and _descends_from(int(entry.name), me):
            found.append(int(entry.name))
    return found


def _descends_from(pid: int, ancestor: int) -> bool:
    for _ in range(8):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after "(comm) state" is the ppid
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


async def _until_done_or(
    task: asyncio.Future[Any], abort: asyncio.Event, needles: Sequence[str], grace: float = 30.0
) -> None:
    """Wait for ``task``; if ``abort`` is set first, send its helm SIGTERM (helm marks the release
    failed and exits), wait for that, and raise :class:`HelmAborted`."""
    stopper = asyncio.ensure_future(abort.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if task.done():
        return
    for pid in await asyncio.to_thread(_helm_processes, needles):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    done, _ = await asyncio.wait({task}, timeout=grace)
    if not done:
        task.cancel()
    with contextlib.suppress(BaseException):
        await task
    raise HelmAborted("stopped: the resource is being deleted")
