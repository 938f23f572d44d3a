"""kopf's session to the API server: requests in flight are bounded, watches are not counted.

A local aiohttp server stands in for the endpoint: what is checked is the client side (how many
requests and connections the session has at once), not any API server behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import aiohttp
import kopf
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from helm_operator.adapters.apisession import InFlightLimit, bounded_session


class Server:
    """Counts concurrent requests (until their body is sent) and distinct client connections."""

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0
        self.peers: set[tuple[str, int]] = set()
        self.headers: list[str] = []
        self.watch_open = asyncio.Event()

    async def slow(self, request: web.Request) -> web.StreamResponse:
        """Headers at once, the body 30 ms later: as a large list arrives after its headers."""
        self.peers.add(request.transport.get_extra_info("peername"))  # type: ignore[union-attr]
        self.headers.append(request.headers.get("Authorization", ""))
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            await asyncio.sleep(0.03)
            await resp.write(json.dumps({"items": ["x" * 1000] * 50}).encode())
            await resp.write_eof()
            return resp
        finally:
            self.active -= 1

    async def watch(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(b'{"type": "ADDED"}\n')
        self.watch_open.set()
        await asyncio.sleep(5)  # a long-lived stream: far longer than the test
        return resp


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[tuple[Server, str]]:
    srv = Server()
    app = web.Application()
    app.router.add_get("/slow", srv.slow)
    app.router.add_get("/watch", srv.watch)
    async with TestServer(app, host="127.0.0.1") as test_server:
        yield srv, str(test_server.make_url("")).rstrip("/")


def test_a_burst_is_held_to_the_limit_of_requests_and_connections() -> None:
    async def main() -> None:
        async with serving() as (srv, url):
            limit = InFlightLimit(5)
            async with aiohttp.ClientSession(middlewares=(limit,)) as session:

                async def one() -> int:
                    async with session.get(f"{url}/slow") as resp:
                        return len((await resp.json())["items"])

                sizes = await asyncio.gather(*(one() for _ in range(100)))
            assert sizes == [50] * 100  # every body arrives whole, after the middleware read it
            assert srv.peak == 5 and limit.peak == 5
            assert len(srv.peers) <= 5, f"{len(srv.peers)} connections for a limit of 5"

    asyncio.run(main())


def test_without_the_limit_the_same_burst_opens_a_connection_per_request() -> None:
    """The control: what the limit prevents does happen without it (the test above can fail)."""

    async def main() -> None:
        async with serving() as (srv, url):
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

                async def one() -> None:
                    async with session.get(f"{url}/slow") as resp:
                        await resp.read()

                await asyncio.gather(*(one() for _ in range(100)))
            assert srv.peak > 5 and len(srv.peers) > 5

    asyncio.run(main())


def test_a_watch_takes_no_slot() -> None:
    async def main() -> None:
        async with serving() as (srv, url):
            limit = InFlightLimit(1)
            async with aiohttp.ClientSession(middlewares=(limit,)) as session:
                stream = await session.get(f"{url}/watch", params={"watch": "true"})
                await asyncio.wait_for(srv.watch_open.wait(), 2)
                assert await stream.content.readline() == b'{"type": "ADDED"}\n'
                # The stream stays open; a request still gets the only slot at once.
                async with session.get(f"{url}/slow") as resp:
                    assert resp.status == 200
                assert limit.peak == 1 and limit.in_flight == 0
                stream.close()

    asyncio.run(main())


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1, not 0"):
        InFlightLimit(0)


def test_the_session_carries_the_credentials_kopf_would_send() -> None:
    async def main() -> None:
        async with serving() as (srv, url):
            info = kopf.ConnectionInfo(server=url, scheme="Bearer", token="t0ken", default_namespace="ns1")
            ctx = bounded_session(info, limit=2)
            assert isinstance(ctx, kopf.AiohttpSession)
            assert (ctx.server, ctx.default_namespace) == (url, "ns1")
            try:
                async with ctx.aiohttp_session.get(f"{url}/slow") as resp:
                    assert resp.status == 200
            finally:
                await ctx.aiohttp_session.close()
            assert srv.headers == ["Bearer t0ken"]

    asyncio.run(main())


def test_kopfs_writes_pass_the_lease_gate_and_its_reads_do_not() -> None:
    """With leader election kopf's own patches (finalizers, its annotations) are fenced like
    every other write: a gate that refuses stops the request before it is sent."""

    class Refused(Exception):
        pass

    asked: list[str] = []

    def gate(what: str) -> None:
        asked.append(what)
        raise Refused(what)

    async def main() -> None:
        srv = Server()
        app = web.Application()
        app.router.add_get("/slow", srv.slow)
        app.router.add_patch("/slow", srv.slow)
        async with TestServer(app, host="127.0.0.1") as test_server:
            url = str(test_server.make_url("")).rstrip("/")
            ctx = bounded_session(kopf.ConnectionInfo(server=url), limit=2, gate=gate)
            try:
                async with ctx.aiohttp_session.get(f"{url}/slow") as resp:
                    assert resp.status == 200
                with pytest.raises(Refused):
                    await ctx.aiohttp_session.patch(f"{url}/slow", json={})
            finally:
                await ctx.aiohttp_session.close()
        assert asked == ["PATCH /slow"] and len(srv.headers) == 1  # the patch never reached the server

    asyncio.run(main())
