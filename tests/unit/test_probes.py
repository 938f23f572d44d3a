"""Probes, bind addresses, leader-election settings and log lines: the decisions, without a cluster."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import threading
import time
import urllib.error
import urllib.request

import pytest

from helm_operator.adapters.metrics import RELEASES, ReleaseStates
from helm_operator.runtime import logs
from helm_operator.runtime.leader import LeaderSettings
from helm_operator.runtime.probes import Probes, parse_bind, serve


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bind_addresses() -> None:
    assert parse_bind(":8080", "--x") == ("0.0.0.0", 8080)
    assert parse_bind("127.0.0.1:9", "--x") == ("127.0.0.1", 9)
    assert parse_bind("[::]:8081", "--x") == ("::", 8081)
    assert parse_bind("0", "--x") is None
    with pytest.raises(ValueError, match=r"--metrics-bind-address '8080': expected HOST:PORT"):
        parse_bind("8080", "--metrics-bind-address")
    with pytest.raises(ValueError):
        parse_bind(":99999", "--x")


def test_readiness_waits_for_the_first_listing_to_be_handled_and_the_caches() -> None:
    p = Probes()
    assert p.ready() == (False, "starting")
    p.role = "standby"
    assert p.ready()[0]  # a standby is able to take over: ready
    p.lead()
    assert p.ready() == (False, "listing the watched resources")
    p.expect(["k/ns/a", "k/ns/b"])
    p.handled("k/ns/a")
    assert p.ready() == (False, "1 resources not handled yet since start")
    unsynced: list[str | None] = ["waiting for the first listing of Service.v1"]
    p.ready_check("dependent watches", lambda: unsynced[0])
    p.handled("k/ns/b")
    assert p.ready() == (False, "dependent watches: waiting for the first listing of Service.v1")
    unsynced[0] = None
    assert p.ready()[0]
    p.handled("k/ns/new")  # resources created later do not matter
    assert p.ready()[0]


def test_liveness_fails_when_the_loop_stops_beating_or_the_election_thread_dies() -> None:
    clock = Clock()
    p = Probes(stall_after=30, clock=clock)
    p.lead()
    clock.now += 29
    assert p.live()[0]
    clock.now += 2
    assert p.live() == (False, "event loop stalled for 31s")
    p.beat()
    assert p.live()[0]
    alive = [True]
    p.live_check("leader election", lambda: None if alive[0] else "election thread stopped")
    alive[0] = False
    assert p.live() == (False, "leader election: election thread stopped")


def test_probe_endpoints_answer_while_the_event_loop_is_blocked() -> None:
    p = Probes(stall_after=0.5)
    server = serve(("127.0.0.1", 0), p)
    port = server.server_address[1]

    def get(path: str) -> tuple[int, dict[str, object]]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    async def beating() -> None:
        p.lead()
        p.expect([])
        for _ in range(5):
            p.beat()
            await asyncio.sleep(0.05)
        assert get("/healthz")[0] == 200
        assert get("/readyz") == (200, {"ok": True, "role": "leader", "reason": p.ready()[1]})
        time.sleep(1.0)  # a handler that blocks the loop (the bug liveness exists for)
        status, body = await asyncio.to_thread(get, "/healthz")
        assert status == 503 and "event loop stalled" in str(body["reason"])

    try:
        asyncio.run(beating())
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/nothing-here", timeout=5)
    finally:
        server.shutdown()


def test_leader_settings_refuse_what_the_client_library_would_exit_on() -> None:
    assert LeaderSettings("ns").problems() == []
    assert any(
        "longer than the renew deadline" in p for p in LeaderSettings("ns", lease_duration=5).problems()
    )
    assert any("1.2 x the retry period" in p for p in LeaderSettings("ns", renew_deadline=2).problems())


def test_release_states_are_counted_per_watch() -> None:
    states = ReleaseStates()
    states.set("W.v1.g", "ns/a", "ready")
    states.set("W.v1.g", "ns/b", "failed")
    states.set("W.v1.g", "ns/b", "ready")
    assert RELEASES.labels(watch="W.v1.g", state="ready")._value.get() == 2
    assert RELEASES.labels(watch="W.v1.g", state="failed")._value.get() == 0
    states.forget("W.v1.g", "ns/a")
    assert RELEASES.labels(watch="W.v1.g", state="ready")._value.get() == 1


def _logged(fmt: str, **extra: object) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.ResourceFilter())
    handler.setFormatter(logs.JsonFormatter() if fmt == "json" else logs.TextFormatter())
    logger = logging.getLogger(f"test.logs.{fmt}.{len(extra)}")
    logger.addHandler(handler)
    logger.propagate = False
    logger.warning("installed %s", "revision 1", extra=extra)
    return stream.getvalue()


def test_log_lines_name_the_resource_they_are_about() -> None:
    with logs.resource("Tiny", "ns1", "obs"):
        line = json.loads(_logged("json"))
        text = _logged("text")
    assert line["msg"] == "installed revision 1" and line["level"] == "warning"
    assert line["resource"] == {"kind": "Tiny", "namespace": "ns1", "name": "obs"}
    assert "WARNING test.logs.text.0: [Tiny ns1/obs] installed revision 1" in text
    assert "resource" not in json.loads(_logged("json"))  # outside a handler: no identity
    kopf_line = json.loads(_logged("json", k8s_ref={"kind": "Tiny", "name": "c", "namespace": None}))
    assert kopf_line["resource"] == {"kind": "Tiny", "name": "c"}  # cluster-scoped: no namespace


def test_the_identity_follows_tasks_and_threads_started_inside() -> None:
    seen: list[dict[str, str] | None] = []

    async def handler() -> None:
        async def task() -> None:
            seen.append(logs._current.get())

        with logs.resource("Tiny", "ns", "x"):
            await asyncio.to_thread(lambda: seen.append(logs._current.get()))
            await asyncio.create_task(task())
        seen.append(logs._current.get())

    asyncio.run(handler())
    other = threading.Thread(target=lambda: seen.append(logs._current.get()))
    other.start()
    other.join()
    assert seen == [{"kind": "Tiny", "namespace": "ns", "name": "x"}] * 2 + [None, None]


def test_a_hooks_lines_name_its_resource_once() -> None:
    """``ctx.log`` inside the resource's handler (where the handler's identity is set too) and
    outside it (a scheduled run) names the resource once, as the handler's own lines do."""
    from helm_operator.hooks._engines.services import _ResourceLog

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.ResourceFilter())
    handler.setFormatter(logs.TextFormatter())
    base = logging.getLogger("test.logs.hook")
    base.addHandler(handler)
    base.propagate = False
    base.setLevel(logging.INFO)
    hook_log = _ResourceLog(base, {"k8s_ref": {"kind": "Tiny", "name": "obs", "namespace": "ns1"}})
    with logs.resource("Tiny", "ns1", "obs"):
        hook_log.info("backup %s taken", "b-1")
    hook_log.info("outside")
    first, second = stream.getvalue().splitlines()
    assert first.endswith("test.logs.hook: [Tiny ns1/obs] backup b-1 taken"), first
    assert second.endswith("test.logs.hook: [Tiny ns1/obs] outside"), second
