"""Liveness and readiness of the operator process, served for the kubelet's probes.

Liveness fails when the event loop stalls (no heartbeat for ``stall_after`` seconds) or, on a
standby, when the election thread has died: both are states a restart fixes. Readiness means
"this replica is doing its job": a standby waiting for the lease is ready (it is healthy and able
to take over; a rolling update must not wait for it to lead), a leader is ready once every custom
resource of its first listing has been handled once and every cache it started has listed.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

log = logging.getLogger(__name__)

Role = Literal["starting", "standby", "leader"]
Check = Callable[[], str | None]  # None: fine; otherwise why not


def parse_bind(value: str, flag: str) -> tuple[str, int] | None:
    """``:8080``, ``0.0.0.0:8080``, ``[::]:8080`` or ``127.0.0.1:8080``; ``0`` or empty: off."""
    if value in ("", "0"):
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{flag} {value!r}: expected HOST:PORT or :PORT (0 turns it off)")
    return host.strip("[]") or "0.0.0.0", int(port)


class Probes:
    def __init__(self, stall_after: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_after = stall_after
        self.clock = clock
        self.role: Role = "starting"
        self._beat = clock()
        self._expected: set[str] | None = None  # CRs of the first listing, once listed
        self._handled: set[str] = set()
        self._live_checks: list[tuple[str, Check]] = []
        self._ready_checks: list[tuple[str, Check]] = []
        self._mutex = threading.Lock()

    def beat(self) -> None:
        """Called every second from the event loop: it is turning."""
        self._beat = self.clock()

    def lead(self) -> None:
        self.role = "leader"
        self._beat = self.clock()

    def live_check(self, name: str, check: Check) -> None:
        self._live_checks.append((name, check))

    def ready_check(self, name: str, check: Check) -> None:
        self._ready_checks.append((name, check))

    def expect(self, resources: Iterable[str]) -> None:
        """The custom resources the first listing found; readiness waits for each to be handled."""
        with self._mutex:
            self._expected = set(resources)

    def handled(self, resource: str) -> None:
        with self._mutex:
            self._handled.add(resource)

    def pending(self) -> int | None:
        """How many resources of the first listing have not been handled yet (None: not listed)."""
        with self._mutex:
            return None if self._expected is None else len(self._expected - self._handled)

    def live(self) -> tuple[bool, str]:
        if self.role == "leader":
            stalled = self.clock() - self._beat
            if stalled > self.stall_after:
                return False, f"event loop stalled for {stalled:.0f}s"
        for name, check in self._live_checks:
            why = check()
            if why:
                return False, f"{name}: {why}"
        return True, self.role

    def ready(self) -> tuple[bool, str]:
        if self.role == "standby":
            return True, "standby: waiting for the leader lease"
        if self.role == "starting":
            return False, "starting"
        pending = self.pending()
        if pending is None:
            return False, "listing the watched resources"
        if pending:
            return False, f"{pending} resources not handled yet since start"
        for name, check in self._ready_checks:
            why = check()
            if why:
                return False, f"{name}: {why}"
        return True, "leader: caches synced, every resource handled"


class _Handler(BaseHTTPRequestHandler):
    probes: Probes

    def do_GET(self) -> None:
        checks: dict[str, Callable[[], tuple[bool, str]]] = {
            "/healthz": self.probes.live,
            "/livez": self.probes.live,
            "/readyz": self.probes.ready,
        }
        check = checks.get(self.path.split("?")[0])
        if check is None:
            self.send_error(404)
            return
        ok, why = check()
        body = json.dumps({"ok": ok, "role": self.probes.role, "reason": why}).encode()
        self.send_response(200 if ok else 503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the kubelet asks every few seconds; nothing worth a log line


def serve(address: tuple[str, int], probes: Probes) -> ThreadingHTTPServer:
    """Answer /healthz and /readyz from a thread: they must answer while the loop is stuck."""
    handler = type("ProbeHandler", (_Handler,), {"probes": probes})
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    server_class = type("ProbeServer", (ThreadingHTTPServer,), {"address_family": family})
    server: ThreadingHTTPServer = server_class(address, handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="probes", daemon=True).start()
    log.info("health probes on %s:%d (/healthz, /readyz)", *address)
    return server
