"""A thin adapter over pyhelm3's command layer: one client, our flags, error mapping, a process cap.

pyhelm3 builds and runs the ``helm`` command lines; we extend it (not fork it) with the flags it
lacks (``--labels``, a per-call ``--history-max``, later ``--post-renderer``) by appending them in
``run`` from a context variable, so its own argument building and JSON parsing stay in use.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import os
import re
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyhelm3 import Command, errors

from helm_operator import postrender
from helm_operator.release.state import OWNER_LABEL
from helm_operator.watches import ChartRef

_extra_args: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("helm_extra_args", default=())

_SECRET_KEY = re.compile(r"(password|passwd|secret|token|apikey|api_key|credential|private)", re.I)


class HelmError(RuntimeError):
    """A failed helm command, classified; ``message`` is safe to show (secrets masked)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def secret_strings(values: Any, key: str = "") -> set[str]:
    """Values under keys that look secret, and ``key=value`` pairs inside strings, to be masked."""
    found: set[str] = set()
    if isinstance(values, Mapping):
        for k, v in values.items():
            found |= secret_strings(v, str(k))
    elif isinstance(values, list):
        for v in values:
            found |= secret_strings(v, key)
    elif isinstance(values, str | int | float) and not isinstance(values, bool):
        text = str(values)
        if key and _SECRET_KEY.search(key) and len(text) >= 3:
            found.add(text)
        if isinstance(values, str):
            for m in re.finditer(rf"(?:{_SECRET_KEY.pattern})\s*[=:]\s*(\S+)", text, re.I):
                found.add(m.group(2))
    return found


def mask(message: str, values: Any) -> str:
    for s in sorted(secret_strings(values), key=len, reverse=True):
        message = message.replace(s, "******")
    return message


def _classify(exc: errors.Error) -> str:
    text = exc.stderr.decode(errors="replace").lower() if exc.stderr else ""
    if isinstance(exc, errors.FailedToRenderChartError) or "parse error" in text or "template:" in text:
        return "RenderFailed"
    if "timed out" in text or "context deadline exceeded" in text:
        return "Timeout"
    if isinstance(exc, errors.ConnectionError):
        return "ConnectionFailed"
    if "another operation" in text:
        return "Locked"
    return "HelmFailed"


class _Command(Command):  # type: ignore[misc]
    """pyhelm3's Command with the extra flags of the current call appended."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.invocations = 0

    async def run(self, command: list[Any], input: bytes | None = None) -> bytes:
        self.invocations += 1
        result: bytes = await super().run([*command, *_extra_args.get()], input)
        return result


@contextlib.contextmanager
def _with_args(args: Sequence[str]) -> Iterator[None]:
    token = _extra_args.set(tuple(args))
    try:
        yield
    finally:
        _extra_args.reset(token)


@dataclass(frozen=True)
class HelmSettings:
    executable: str = "helm"
    kubeconfig: Path | None = None
    max_processes: int = 4
    shutdown_grace: float = 120.0
    postrender_dir: Path | None = None  # where the ownership post-renderer is laid out; None: off
    chart_cache: Path = Path.home() / ".cache/helm-operator/charts"  # pulled remote charts


class Helm:
    """Every ``helm`` process the operator starts goes through here (and is capped and counted)."""

    def __init__(self, settings: HelmSettings) -> None:
        self.settings = settings
        settings.chart_cache.mkdir(parents=True, exist_ok=True)
        self._cmd = _Command(
            executable=settings.executable,
            kubeconfig=settings.kubeconfig,
            unpack_directory=str(settings.chart_cache),
        )
        self._slots = asyncio.Semaphore(settings.max_processes)
        self._postrender_ready = False

    async def _prepare_postrender(self) -> bool:
        """Lay out the post-renderer once, on the first install/upgrade (not at start-up: a restart
        with nothing to do must not start helm). Helm 4 needs it as a plugin, Helm 3 on PATH."""
        if self.settings.postrender_dir is None:
            return False
        if not self._postrender_ready:
            env = postrender.install(self.settings.postrender_dir)
            major = (await asyncio.to_thread(self._cmd.client_version)).major
            os.environ["PATH"] = env["PATH"]
            if major >= 4:
                os.environ["HELM_PLUGINS"] = env["HELM_PLUGINS"]
            self._postrender_ready = True
        return True

    @property
    def invocations(self) -> int:
        return int(self._cmd.invocations)

    def version(self) -> str:
        return str(self._cmd.client_version())

    async def _call(self, values: Any, extra: Sequence[str], coro_factory: Any) -> Any:
        async with self._slots:
            with _with_args(extra):
                task = asyncio.ensure_future(coro_factory())  # copies the context: extra args
            try:
                try:
                    return await asyncio.shield(task)
                except asyncio.CancelledError:
                    # Shutting down: let helm finish its action rather than leave it pending-*.
                    with contextlib.suppress(BaseException):
                        await asyncio.wait_for(asyncio.shield(task), self.settings.shutdown_grace)
                    raise
            except errors.Error as exc:
                text = exc.stderr.decode(errors="replace").strip() if exc.stderr else str(exc)
                text = text.removeprefix("Error: ")
                raise HelmError(_classify(exc), mask(text, values)) from None

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
    ) -> dict[str, Any]:
        extra = ["--history-max", str(history_max)]
        if labels:
            extra += ["--labels", ",".join(f"{k}={v}" for k, v in labels.items())]
        if await self._prepare_postrender():
            extra += postrender.args_for(labels[OWNER_LABEL], owner_ref, namespace)
        chart_ref: Path | str = chart.path if chart.path is not None else chart.ref

        async def go() -> Any:
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
            )

        result: dict[str, Any] = await self._call(values, extra, go)
        return result

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

        unpacked: Path = await self._call({}, [], go)
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

        await self._call({}, ["--history-max", str(history_max)], go)

    async def uninstall(self, name: str, namespace: str, *, timeout: float, wait: bool) -> None:
        async def go() -> Any:
            return await self._cmd.uninstall(name, namespace=namespace, timeout=f"{int(timeout)}s", wait=wait)

        try:
            await self._call({}, [], go)
        except HelmError as exc:
            if "not found" not in exc.message:
                raise
