"""The hooks' Kubernetes client: the synchronous dynamic client, run in threads."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import ERROR_CHANNEL

from helm_operator.adapters.kube import Kube
from helm_operator.hooks.builtin import jobs
from helm_operator.hooks.context import ExecFailed


def exit_status(status: str) -> tuple[int | None, str]:
    """An exec's exit code from the Status the API server sends on its error channel, and the
    message; (None, message) when the command did not run (no container, the node refused)."""
    try:
        body = json.loads(status) if status else {}
    except ValueError:
        return None, status.strip()
    if body.get("status") == "Success":
        return 0, ""
    message = str(body.get("message") or status).strip()
    for cause in (body.get("details") or {}).get("causes") or ():
        if cause.get("reason") == "ExitCode" and str(cause.get("message", "")).isdigit():
            return int(cause["message"]), message
    return None, message


def refused(exc: Exception) -> str:
    """Why the API server refused an exec's upgrade to a websocket, in one line: its status code and
    the Status message of its answer (the websocket library's own text holds every header)."""
    code = getattr(exc, "status_code", None)
    if code is None:
        return str(exc)
    body = getattr(exc, "resp_body", None)
    try:
        said = json.loads(body) if body else {}
    except (TypeError, ValueError):
        said = {}
    message = str(said.get("message") or "").strip() if isinstance(said, dict) else ""
    return f"refused ({code}): {message}" if message else f"refused ({code})"


class AsyncKube:
    """Implements :class:`helm_operator.hooks.context.KubeClient` against the API server."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube

    def _ns(self, res: Any, namespace: str | None) -> str | None:
        return namespace if res.namespaced else None

    def _get(self, api_version: str, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
        res = self._kube.resource(api_version, kind)
        try:
            found: dict[str, Any] = res.get(name=name, namespace=self._ns(res, namespace)).to_dict()
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return found

    async def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        return await asyncio.to_thread(self._get, api_version, kind, name, namespace)

    def _list(
        self, api_version: str, kind: str, namespace: str | None, labels: Mapping[str, str] | None
    ) -> list[dict[str, Any]]:
        res = self._kube.resource(api_version, kind)
        selector = ",".join(f"{k}={v}" for k, v in (labels or {}).items()) or None
        found = res.get(namespace=self._ns(res, namespace), label_selector=selector).to_dict()
        items: list[dict[str, Any]] = found.get("items") or []
        return items

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._list, api_version, kind, namespace, labels)

    def _create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        res = self._kube.resource(str(obj["apiVersion"]), str(obj["kind"]))
        meta = obj.get("metadata") or {}
        ns = self._ns(res, meta.get("namespace"))
        try:
            created: dict[str, Any] = res.create(body=dict(obj), namespace=ns).to_dict()
        except ApiException as exc:
            if exc.status != 409:
                raise
            existing = self._get(str(obj["apiVersion"]), str(obj["kind"]), str(meta["name"]), ns)
            if existing is None:  # deleted in between: the caller retries
                raise
            return existing
        return created

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        if obj.get("kind") in jobs.RUNS_CONTAINERS:  # a hand-built Job too: no script made of values
            jobs.check(obj)
        return await asyncio.to_thread(self._create, obj)

    def _patch(
        self, api_version: str, kind: str, name: str, namespace: str | None, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        res = self._kube.resource(api_version, kind)
        out: dict[str, Any] = res.patch(
            body=dict(patch),
            name=name,
            namespace=self._ns(res, namespace),
            content_type="application/merge-patch+json",
        ).to_dict()
        return out

    async def patch(
        self, api_version: str, kind: str, name: str, namespace: str | None, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        return await asyncio.to_thread(self._patch, api_version, kind, name, namespace, patch)

    def _delete(self, api_version: str, kind: str, name: str, namespace: str | None) -> bool:
        res = self._kube.resource(api_version, kind)
        try:
            res.delete(
                name=name, namespace=self._ns(res, namespace), body={"propagationPolicy": "Background"}
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        return await asyncio.to_thread(self._delete, api_version, kind, name, namespace)

    def _exec(
        self, pod: str, namespace: str, argv: Sequence[str], container: str | None, timeout: float
    ) -> str:
        # A client of its own: the stream helper swaps the request method of the client it is given,
        # which would turn every other thread's request on a shared client into a websocket.
        api = client.ApiClient(self._kube.api.configuration)
        where = f"{namespace}/{pod}" + (f" ({container})" if container else "")
        try:
            extra = {"container": container} if container else {}
            try:
                ws = stream(
                    client.CoreV1Api(api).connect_get_namespaced_pod_exec,
                    pod,
                    namespace,
                    command=list(argv),
                    stdout=True,
                    stderr=True,
                    stdin=False,
                    tty=False,
                    _preload_content=False,
                    **extra,
                )
            except ApiException as exc:
                raise ExecFailed(f"exec in {where}: {exc.status} {exc.reason}") from exc
            except Exception as exc:  # the websocket library's own errors (refused upgrade, closed)
                raise ExecFailed(f"exec in {where}: {refused(exc)}") from exc
            try:
                ws.run_forever(timeout=timeout)
                if ws.is_open():
                    raise ExecFailed(f"exec in {where}: still running after {timeout:g}s")
                out, err = ws.read_stdout(), ws.read_stderr()
                status = ws.read_channel(ERROR_CHANNEL)
            finally:
                ws.close()
        finally:
            api.close()
        code, why = exit_status(status)
        if code != 0:
            detail = str(err).strip()[-300:] or why
            ran = f"{argv[0]} exited {code}" if code is not None else "did not run"
            raise ExecFailed(f"exec in {where}: {ran}: {detail}", code)
        return str(out)

    async def exec(
        self,
        pod: str,
        namespace: str,
        argv: Sequence[str],
        container: str | None = None,
        timeout: float = 10.0,
    ) -> str:
        return await asyncio.to_thread(self._exec, pod, namespace, argv, container, timeout)
