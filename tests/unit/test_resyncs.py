"""The resync sweep: who is due, what is decided from memory, and how many reads run at a time."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import kopf

from helm_operator.config.charts import ChartRef
from helm_operator.config.watches import Watch
from helm_operator.runtime.desired import Resource
from helm_operator.runtime.resyncs import Resyncs
from helm_operator.runtime.settled import status_digest

WATCH = Watch("g.io", "v1", "Web", ChartRef("charts/web"), "webs", "Namespaced")


def web(name: str) -> Resource:
    return Resource(WATCH, "ns", name, f"uid-{name}", 1, {}, {}, {})


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Owner:
    """Handlers that settle whatever ``settled`` names and record every read."""

    settled: set[str] = field(default_factory=set)
    reads: list[tuple[str, int]] = field(default_factory=list)
    fail: BaseException | None = None
    gate: asyncio.Event | None = None  # reads wait for it
    statuses: list[str] = field(default_factory=list)  # the status digests decisions were given

    async def from_memory(self, cr: Resource, status: str) -> bool:
        self.statuses.append(status)
        return cr.name in self.settled

    async def reread(self, cr: Resource, retry: int) -> None:
        self.reads.append((cr.name, retry))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail


async def reads_done(resyncs: Resyncs) -> None:
    while resyncs.reading:
        await asyncio.sleep(0)


async def sweep_and_settle(resyncs: Resyncs) -> None:
    await resyncs.sweep()
    await reads_done(resyncs)


def test_a_resource_is_due_a_period_after_it_was_handled_and_memory_spares_the_read() -> None:
    async def scenario() -> None:
        clock, owner = Clock(), Owner(settled={"a"})
        resyncs = Resyncs(clock)
        resyncs.seen("k/a", owner, web("a"), 60.0)
        resyncs.seen("k/b", owner, web("b"), 60.0)
        clock.now += 59
        await sweep_and_settle(resyncs)
        assert owner.reads == []
        clock.now += 1
        await sweep_and_settle(resyncs)
        assert owner.reads == [("b", 0)]  # "a" was decided from memory
        assert resyncs.members["k/a"].due == clock.now + 60
        assert resyncs.members["k/b"].due == clock.now + 60

    asyncio.run(scenario())


def test_reads_are_bounded_and_the_rest_wait_for_a_later_sweep() -> None:
    async def scenario() -> None:
        clock, gate = Clock(), asyncio.Event()
        owner = Owner(gate=gate)
        resyncs = Resyncs(clock, reads=2)
        for name in "abc":
            resyncs.seen(f"k/{name}", owner, web(name), 10.0)
        clock.now += 10
        await resyncs.sweep()
        await asyncio.sleep(0)
        assert [n for n, _ in owner.reads] == ["a", "b"]
        await resyncs.sweep()  # "a" and "b" still read: neither started again, "c" still waits
        await asyncio.sleep(0)
        assert [n for n, _ in owner.reads] == ["a", "b"]
        gate.set()
        await reads_done(resyncs)
        await sweep_and_settle(resyncs)
        assert [n for n, _ in owner.reads] == ["a", "b", "c"]

    asyncio.run(scenario())


def test_a_temporary_error_sets_the_next_resync_and_counts_retries() -> None:
    async def scenario() -> None:
        clock = Clock()
        owner = Owner(fail=kopf.TemporaryError("API server unreachable", delay=5))
        resyncs = Resyncs(clock)
        resyncs.seen("k/a", owner, web("a"), 60.0)
        clock.now += 60
        await sweep_and_settle(resyncs)
        assert resyncs.members["k/a"].due == clock.now + 5
        clock.now += 5
        owner.fail = RuntimeError("a bug")  # logged; the next resync comes a period later
        await sweep_and_settle(resyncs)
        assert resyncs.members["k/a"].due == clock.now + 60
        clock.now += 60
        owner.fail = None
        await sweep_and_settle(resyncs)
        assert owner.reads == [("a", 0), ("a", 1), ("a", 2)]
        assert resyncs.members["k/a"].retry == 0

    asyncio.run(scenario())


def test_forgotten_resources_and_disabled_periods_are_never_resynced() -> None:
    async def scenario() -> None:
        clock, gate = Clock(), asyncio.Event()
        owner = Owner(gate=gate)
        resyncs = Resyncs(clock)
        resyncs.seen("k/a", owner, web("a"), 60.0)
        resyncs.seen("k/off", owner, web("off"), 0.0)
        clock.now += 600
        await resyncs.sweep()
        await asyncio.sleep(0)
        resyncs.forget("k/a")  # deleted while its read ran: the read does not bring it back
        gate.set()
        await reads_done(resyncs)
        assert "k/a" not in resyncs.members
        clock.now += 600
        await sweep_and_settle(resyncs)
        assert owner.reads == [("a", 0)]

    asyncio.run(scenario())


def test_stop_waits_for_reads_in_flight() -> None:
    async def scenario() -> None:
        clock, gate = Clock(), asyncio.Event()
        owner = Owner(gate=gate)
        resyncs = Resyncs(clock)
        resyncs.seen("k/a", owner, web("a"), 1.0)
        clock.now += 1
        await resyncs.sweep()
        stopping = asyncio.create_task(resyncs.stop())
        await asyncio.sleep(0)
        assert not stopping.done()
        gate.set()
        await stopping
        assert resyncs.reading == {}

    asyncio.run(scenario())


def test_no_resync_while_a_change_handler_is_at_it_and_a_period_after() -> None:
    async def scenario() -> None:
        clock, owner = Clock(), Owner()
        resyncs = Resyncs(clock)
        with resyncs.handled("k/a"):
            resyncs.seen("k/a", owner, web("a"), 10.0)
            clock.now += 300  # queued behind other reconciles for a long time
            await sweep_and_settle(resyncs)
            assert owner.reads == []
        assert resyncs.members["k/a"].due == clock.now + 10
        clock.now += 10
        await sweep_and_settle(resyncs)
        assert owner.reads == [("a", 0)]

    asyncio.run(scenario())


def test_a_member_keeps_no_spec_no_status_and_only_the_operator_s_annotations() -> None:
    """Per resource the sweep keeps what a decision from memory needs: at 1000 resources a kept
    status (a few KiB of conditions and history each) or ``kubectl apply``'s copy of the object
    would be megabytes held for nothing."""
    status = {"conditions": [{"type": "Ready", "status": "True", "message": "revision 2 is up to date"}]}
    annotations = {
        "helm-operator.io/drift": "warn",
        "helm-operator.io/chart-version": "1.2.3",
        "kubectl.kubernetes.io/last-applied-configuration": '{"spec": {"replicas": 3}}',
    }
    cr = Resource(WATCH, "ns", "a", "uid-a", 4, {"replicas": 3}, status, annotations)
    clock, owner = Clock(), Owner(settled={"a"})
    resyncs = Resyncs(clock)
    resyncs.seen("k/a", owner, cr, 60.0)
    member = resyncs.members["k/a"]
    assert (member.resource.spec, member.resource.status) == ({}, {})
    assert dict(member.resource.annotations) == {
        "helm-operator.io/drift": "warn",
        "helm-operator.io/chart-version": "1.2.3",
    }
    assert (member.resource.name, member.resource.uid, member.resource.generation) == ("a", "uid-a", 4)
    assert member.status == status_digest(status)
    clock.now += 61
    asyncio.run(sweep_and_settle(resyncs))
    assert owner.statuses == [status_digest(status)] and owner.reads == []


def test_resources_woken_by_an_ended_wait_are_resynced_at_the_next_sweep() -> None:
    async def scenario() -> None:
        clock, owner = Clock(), Owner()
        resyncs = Resyncs(clock)
        for name in ("a", "b"):
            resyncs.seen(f"k/{name}", owner, web(name), 60.0)
        clock.now += 5
        resyncs.soon(["k/a", "k/unknown"])  # one it never handled: nothing to do
        await sweep_and_settle(resyncs)
        assert owner.reads == [("a", 0)], "woken a period early, the other not"
        assert resyncs.members["k/a"].due == clock.now + 60

    asyncio.run(scenario())
