"""helm's way to the API server under leader election: the operator's relay forwards what helm
sends with the operator's credentials, streams what comes back, and lets no write past a gate
that refuses (a lapsed lease: the write never reaches the server, whichever process resumed
first). A local aiohttp server stands in for the API server."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import ssl
import stat
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from kubernetes import client

from helm_operator.adapters.relay import Relay
from helm_operator.core.lease import LeaseLost
from helm_operator.runtime.fence import Fence


class ApiServer:
    """What reached the stand-in API server: method, path with query, headers, body."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.port = 0
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(
            {
                "method": request.method,
                "path": request.raw_path,
                "headers": dict(request.headers),
                "body": body,
            }
        )
        if request.query.get("follow") == "forever":  # a stream that ends only when its client goes
            response = web.StreamResponse(headers={"Content-Type": "text/plain"})
            await response.prepare(request)
            while True:
                await response.write(b"line\n")
                await asyncio.sleep(0.1)
        if request.query.get("watch") == "true":  # a watch: events streamed as they happen
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            await response.prepare(request)
            for i in range(3):
                await response.write(json.dumps({"type": "ADDED", "object": {"n": i}}).encode() + b"\n")
                await asyncio.sleep(0.01)
            await response.write_eof()
            return response
        answer = {"method": request.method, "length": len(body)}
        return web.json_response(
            answer, status=201 if request.method == "POST" else 200, headers={"Audit-Id": "x"}
        )

    async def _serve(self) -> int:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        return int(runner.addresses[0][1])

    def __enter__(self) -> ApiServer:
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def api() -> Iterator[ApiServer]:
    with ApiServer() as server:
        yield server


def operator_config(api: ApiServer) -> client.Configuration:
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{api.port}"
    cfg.api_key = {"authorization": "Bearer operator-token"}
    return cfg


class Relayed:
    """helm's side: requests as its kubeconfig says to send them."""

    def __init__(self, kubeconfig: Path) -> None:
        doc = yaml.safe_load(kubeconfig.read_text())
        cluster = doc["clusters"][0]["cluster"]
        self.server = cluster["server"]
        self.token = doc["users"][0]["user"]["token"]
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        self.tls = ssl.create_default_context(cadata=ca)  # the relay's certificate, for 127.0.0.1

    def __call__(
        self, method: str, path: str, body: bytes | None = None, token: str | None = None
    ) -> tuple[int, bytes]:
        request = urllib.request.Request(self.server + path, data=body, method=method)
        request.add_header("Authorization", f"Bearer {token or self.token}")
        request.add_header("User-Agent", "Helm/4.3.1")
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.tls) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()


def test_helms_requests_go_on_with_the_operators_credentials_and_answers_come_back(
    api: ApiServer, tmp_path: Path
) -> None:
    asked: list[str] = []
    relay = Relay(operator_config(api), asked.append, tmp_path)
    kubeconfig = relay.start()
    try:
        assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600  # the token is its user's alone
        helm = Relayed(kubeconfig)
        assert helm.server.startswith("https://127.0.0.1:")

        status, body = helm("GET", "/api/v1/namespaces/ns/secrets?labelSelector=owner%3Dhelm%2Cname%3Dweb")
        assert (status, json.loads(body)) == (200, {"method": "GET", "length": 0})
        big = b"x" * (3 * 1024 * 1024)  # a release record is over a MiB
        status, body = helm("PUT", "/api/v1/namespaces/ns/secrets/sh.helm.release.v1.web.v2", big)
        assert (status, json.loads(body)) == (200, {"method": "PUT", "length": len(big)})
        status, body = helm("GET", "/apis/apps/v1/namespaces/ns/deployments?watch=true")
        assert status == 200 and [json.loads(x)["object"]["n"] for x in body.splitlines()] == [0, 1, 2]
    finally:
        relay.stop()

    # The path and query as helm wrote them, its user agent, the operator's token in place of
    # the relay's; only the write was asked about.
    assert [s["path"] for s in api.seen] == [
        "/api/v1/namespaces/ns/secrets?labelSelector=owner%3Dhelm%2Cname%3Dweb",
        "/api/v1/namespaces/ns/secrets/sh.helm.release.v1.web.v2",
        "/apis/apps/v1/namespaces/ns/deployments?watch=true",
    ]
    assert {s["headers"]["Authorization"] for s in api.seen} == {"Bearer operator-token"}
    assert {s["headers"]["User-Agent"] for s in api.seen} == {"Helm/4.3.1"}
    assert asked == ["PUT /api/v1/namespaces/ns/secrets/sh.helm.release.v1.web.v2"]


def test_a_request_without_the_relays_token_is_refused(api: ApiServer, tmp_path: Path) -> None:
    relay = Relay(operator_config(api), lambda what: None, tmp_path)
    helm = Relayed(relay.start())
    try:
        status, body = helm("GET", "/api/v1/namespaces", token="guessed")
        assert status == 401 and json.loads(body)["kind"] == "Status"
    finally:
        relay.stop()
    assert api.seen == []


def test_a_write_the_gate_refuses_never_reaches_the_api_server(api: ApiServer, tmp_path: Path) -> None:
    def refuse(what: str) -> None:
        raise LeaseLost(f"refused {what}: this replica does not hold Lease ns/lease")

    relay = Relay(operator_config(api), refuse, tmp_path)
    helm = Relayed(relay.start())
    try:
        status, body = helm("PUT", "/api/v1/namespaces/ns/secrets/sh.helm.release.v1.web.v2", b"{}")
        assert status == 503 and "does not hold Lease ns/lease" in json.loads(body)["message"]
        assert helm("GET", "/api/v1/namespaces/ns/pods")[0] == 200  # reads are not the gate's
    finally:
        relay.stop()
    assert [s["method"] for s in api.seen] == ["GET"]


def test_a_helm_that_resumes_after_the_lease_lapsed_is_stopped_at_its_first_write(
    api: ApiServer, tmp_path: Path
) -> None:
    """The pause as the relay meets it: the term ran out while everything was stopped; the first
    write helm sends after it is refused by the clock at the gate, and the fence acts (kills the
    processes the operator started, ends it) before anything is sent on."""
    now = [100.0]
    acted: list[str] = []
    fence = Fence(
        4.0,
        lease="ns/lease",
        stop_processes=lambda: acted.append("killed") or 1,
        exit=lambda: acted.append("exited"),
        clock=lambda: now[0],
        interval=3600.0,
    )
    fence.renewed(100.0)
    fence.arm()
    relay = Relay(operator_config(api), fence.check, tmp_path)
    helm = Relayed(relay.start())
    try:
        assert helm("PUT", "/api/v1/namespaces/ns/secrets/sh.helm.release.v1.web.v2", b"{}")[0] == 200
        now[0] = 130.0  # frozen for half a minute: another replica leads by now
        assert helm("GET", "/api/v1/namespaces/ns/pods")[0] == 200
        status, _ = helm("PUT", "/api/v1/namespaces/ns/secrets/sh.helm.release.v1.web.v2", b"{}")
        assert status == 503
    finally:
        relay.stop()
        fence.disarm()
    assert acted == ["killed", "exited"]
    assert [s["method"] for s in api.seen] == ["PUT", "GET"]  # the write after the pause: never sent


def test_a_stop_cuts_the_streams_still_open_at_once(api: ApiServer, tmp_path: Path) -> None:
    """A leader stopping with a helm stream open (logs, a watch) hands its lease over soon: the
    relay cuts the stream instead of waiting for it to end."""
    relay = Relay(operator_config(api), lambda what: None, tmp_path)
    helm = Relayed(relay.start())
    request = urllib.request.Request(helm.server + "/api/v1/namespaces/ns/pods/p/log?follow=forever")
    request.add_header("Authorization", f"Bearer {helm.token}")
    stream = urllib.request.urlopen(request, timeout=10, context=helm.tls)
    assert stream.readline() == b"line\n"
    began = time.monotonic()
    relay.stop()
    assert time.monotonic() - began < 5
    stream.close()


def test_a_compressed_request_goes_on_as_the_body_the_relay_read(api: ApiServer, tmp_path: Path) -> None:
    """The relay's server decodes a gzip body: it is sent on without the encoding it no longer has."""
    relay = Relay(operator_config(api), lambda what: None, tmp_path)
    helm = Relayed(relay.start())
    body = json.dumps({"kind": "Secret"}).encode()
    request = urllib.request.Request(
        helm.server + "/api/v1/namespaces/ns/secrets", data=gzip.compress(body), method="POST"
    )
    request.add_header("Authorization", f"Bearer {helm.token}")
    request.add_header("Content-Encoding", "gzip")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10, context=helm.tls) as r:
            assert r.status == 201
    finally:
        relay.stop()
    (seen,) = api.seen
    assert seen["body"] == body and "Content-Encoding" not in seen["headers"]
