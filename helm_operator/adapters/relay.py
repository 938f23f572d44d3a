"""The way helm's processes reach the API server under leader election: through the operator.

Every write the operator sends itself passes the lease's gate, but a helm process talks to the API
server on its own. One that was waiting for its objects (``--wait``) when the Pod was frozen
resumes with the rest of the Pod and may write its release record (the revision it was upgrading,
marked deployed over the new leader's) before the watchdog or the fence has killed it: on a busy
node helm and the watchdog resume at once on different cores, and killing sooner only narrows
that race (the e2e test saw two such writes at a load of 11 on two cores).

So helm is given a kubeconfig that names a loopback endpoint in the operator's process instead of
the API server. It forwards each request with the operator's own credentials, and passes every
write through the same gate first, after the request has been read and just before it is sent
on: the gate reads the clock itself, so after a pause it refuses (and the fence stops the
process) whichever process ran first. Reads and watches are forwarded as they come, streamed.

The endpoint accepts only the token written into helm's kubeconfig (made anew by each process,
in its own folder, readable by its user alone): nothing else on the node borrows the operator's
credentials through it. It serves TLS, with a certificate of its own that the kubeconfig names
the CA of: helm's client sends no token over plain HTTP.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import logging
import os
import secrets
import socket
import ssl
import threading
from pathlib import Path
from typing import Any, cast

import aiohttp
import yaml
from aiohttp import web
from kubernetes import client
from multidict import CIMultiDict
from yarl import URL

from helm_operator.adapters import certs
from helm_operator.core.lease import Gate, LeaseLost

log = logging.getLogger(__name__)

READS = frozenset({"GET", "HEAD", "OPTIONS"})
# Hop-by-hop headers (RFC 9110 7.6.1), and those the relay sets itself.
_NOT_FORWARDED = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",
        "host",
        "authorization",
        "content-length",
    }
)
# A request's body is handed on as the relay's server decoded it: its encoding is not the body's.
_NOT_FORWARDED_UP = _NOT_FORWARDED | {"content-encoding"}
MAX_BODY = 64 * 1024 * 1024  # a request helm sends (a release record is at most ~1.4 MB encoded)
START_TIMEOUT = 30.0
CERT_DAYS = 3650  # the process's own: it lives as long as the process


def _ssl_context(cfg: client.Configuration) -> ssl.SSLContext:
    """TLS to the API server as the kubernetes client makes it from the same configuration."""
    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert, cadata=cfg.ca_cert_data)
    if not cfg.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif cfg.assert_hostname is False:
        context.check_hostname = False
    if cfg.cert_file:
        context.load_cert_chain(cfg.cert_file, cfg.key_file)
    return context


def _credentials(cfg: client.Configuration) -> dict[str, str]:
    """The headers that authenticate the operator (its token, read again as the client would)."""
    found: dict[str, str] = {}
    for auth in cfg.auth_settings().values():
        setting = cast(dict[str, Any], auth)
        if setting.get("in") == "header" and setting.get("value"):
            found[str(setting["key"])] = str(setting["value"])
    return found


def _private(path: Path, content: bytes) -> None:
    """A file only this process's user may read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(content)


def _status(code: int, reason: str, message: str) -> web.Response:
    """An answer in the API server's own form, which helm reports as it would the server's."""
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason}
    return web.Response(status=code, text=json.dumps({**body, "code": code}), content_type="application/json")


class Relay:
    """The loopback endpoint helm's processes use (see the module's doc); ``gate`` is asked before
    each write is sent on. Runs its own event loop in a thread of its own: the kopf loop's load
    never delays a request of helm's, nor a refusal."""

    def __init__(self, cfg: client.Configuration, gate: Gate, folder: Path) -> None:
        self._cfg = cfg
        self._gate = gate
        self._server = cfg.host.rstrip("/")
        self._token = secrets.token_urlsafe(32)
        self.kubeconfig = folder / "helm-kubeconfig"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    def start(self) -> Path:
        """Serve, and write helm's kubeconfig (returned)."""
        now = dt.datetime.now(dt.UTC)
        ca = certs.new_ca("helm-operator relay", now, days=CERT_DAYS)
        serving = certs.new_serving(ca, ["127.0.0.1"], now, days=CERT_DAYS)
        folder = self.kubeconfig.parent
        _private(folder / "relay.crt", serving.cert)
        _private(folder / "relay.key", serving.key)
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(folder / "relay.crt", folder / "relay.key")
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="helm-relay", daemon=True)
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._serve(tls), loop).result(START_TIMEOUT)
        server = f"https://127.0.0.1:{self.port}"
        authority = base64.b64encode(ca.cert).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "operator", "cluster": {"server": server, "certificate-authority-data": authority}}
            ],
            "users": [{"name": "helm", "user": {"token": self._token}}],
            "contexts": [{"name": "operator", "context": {"cluster": "operator", "user": "helm"}}],
            "current-context": "operator",
        }
        _private(self.kubeconfig, yaml.safe_dump(config).encode())
        log.info("helm reaches the API server through the lease's gate (%s)", server)
        return self.kubeconfig

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close(), loop).result(10)
        except Exception as exc:  # stopping anyway
            log.debug("helm relay: %s on close", exc)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._loop = self._thread = None

    async def _serve(self, tls: ssl.SSLContext) -> int:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=_ssl_context(self._cfg), limit=0),
            auto_decompress=False,  # bytes as the server sent them, with their Content-Encoding
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),  # watches last minutes
            proxy=self._cfg.proxy or None,
            skip_auto_headers=("User-Agent",),
        )
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        # A helm that hung up (its wait is over) ends the request: the watch it held upstream too.
        # On a stop nothing in flight may write any more (the fence is disarmed first): open streams
        # are cut at once rather than waited for, and the lease is released sooner.
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, handler_cancellation=True, shutdown_timeout=1.0
        )
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, sock, ssl_context=tls).start()
        return int(sock.getsockname()[1])

    async def _close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if not secrets.compare_digest(request.headers.get("Authorization", ""), f"Bearer {self._token}"):
            return _status(401, "Unauthorized", "not a helm process of this operator")
        body = await request.read()
        if request.method not in READS:
            try:
                self._gate(f"{request.method} {request.path}")  # after a lapse: never returns
            except LeaseLost as exc:
                return _status(503, "ServiceUnavailable", str(exc))
        headers: CIMultiDict[str] = CIMultiDict()
        for key, value in request.headers.items():
            if key.lower() not in _NOT_FORWARDED_UP:
                headers.add(key, value)
        headers.setdefault("Accept-Encoding", "identity")  # what helm asked for, not aiohttp's default
        headers.update(_credentials(self._cfg))
        url = URL(self._server + request.raw_path, encoded=True)
        assert self._session is not None
        try:
            upstream = await self._session.request(
                request.method,
                url,
                headers=headers,
                data=body or None,
                allow_redirects=False,
                server_hostname=self._cfg.tls_server_name or None,
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return _status(502, "ServiceUnavailable", f"the API server could not be reached: {exc}")
        async with upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in _NOT_FORWARDED:
                    response.headers.add(key, value)
            if upstream.content_length is not None:
                response.content_length = upstream.content_length
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
        return response
