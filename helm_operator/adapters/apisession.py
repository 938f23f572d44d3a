"""kopf's HTTP session to the API server, with a bound on the requests it has in flight.

kopf's own session has no connection limit: every request made while the others are busy opens
a new TLS connection. A thousand resources seen at once (a start, a bulk apply) meant ~640
connections at once, each with asyncio's 256 KiB TLS read buffer and OpenSSL's state: most of the
process's peak memory, and the heap kept it after the connections closed. Bounding the requests
bounds the connections, and costs no throughput: the API server answers a patch in milliseconds.

Watch streams are not counted: each holds its connection for minutes, and there is one per watched
kind and namespace (a number known only as namespaces appear), so counting them could starve
every other request.

With leader election every request that writes passes the lease's gate first (:class:`Fenced`),
as the kubernetes client's do: kopf's own finalizer and annotation patches included.
"""

from __future__ import annotations

import asyncio

import aiohttp
import kopf

from helm_operator.core.lease import Gate, open_gate

REQUESTS_IN_FLIGHT = 32


class InFlightLimit:
    """aiohttp client middleware: at most ``limit`` requests, other than watches, at once.

    A slot is held until the body is read, which is when aiohttp returns the connection to its
    pool; released at the headers, a burst would still open a connection per waiting request.
    """

    def __init__(self, limit: int = REQUESTS_IN_FLIGHT) -> None:
        if limit < 1:
            raise ValueError(f"a limit of requests in flight must be at least 1, not {limit}")
        self._slots = asyncio.Semaphore(limit)
        self.in_flight = 0
        self.peak = 0

    async def __call__(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        if is_watch(request):
            return await handler(request)
        async with self._slots:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            try:
                response = await handler(request)
                await response.read()
                return response
            finally:
                self.in_flight -= 1


class Fenced:
    """aiohttp client middleware: a request that writes passes ``gate`` first (which returns only
    while this replica may act); reads never wait for it."""

    def __init__(self, gate: Gate) -> None:
        self._gate = gate

    async def __call__(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            self._gate(f"{request.method} {request.url.path}")
        return await handler(request)


def is_watch(request: aiohttp.ClientRequest) -> bool:
    return request.url.query.get("watch", "").lower() in ("true", "1")


def bounded_session(
    info: kopf.ConnectionInfo, limit: int = REQUESTS_IN_FLIGHT, gate: Gate = open_gate
) -> kopf.AiohttpSession:
    """The session kopf would make for ``info``, with :class:`InFlightLimit` (and writes through
    ``gate``). Call it from a coroutine: an aiohttp session belongs to the running loop. kopf
    closes it when it drops the credentials (a new login then makes a new one)."""
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),  # the credentials, basic auth included (kopf >= 1.45)
        proxy=info.proxy_url,
        trust_env=info.trust_env,
        middlewares=(Fenced(gate), InFlightLimit(limit)),
    )
    return kopf.AiohttpSession(
        server=info.server,
        priority=info.priority,
        default_namespace=info.default_namespace,
        expiration=info.expiration,
        aiohttp_session=session,
    )
