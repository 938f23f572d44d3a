"""The lease's gate: a leader acts only within the renew deadline of its last renewal, measured by
the clock at the gate, and a lapse (a pause, or renewals that fail) is acted on once and for good."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import urllib3
import yaml
from kubernetes import client
from urllib3.exceptions import HTTPError

from helm_operator.adapters.helm import Helm, HelmSettings
from helm_operator.adapters.postrender import NAME, Exchange, argv_for, flags_for, install
from helm_operator.core.lease import LeaseLost, LeaseTerm
from helm_operator.core.tenancy import NOT_ENFORCED
from helm_operator.runtime.fence import Fence, FencedApiClient
from helm_operator.runtime.leader import LeaderSettings, Leadership

DEADLINE = 4.0


def test_a_term_is_valid_within_the_deadline_of_the_last_renewal_it_began() -> None:
    term = LeaseTerm(DEADLINE)
    assert not term.valid(0.0)  # never held
    term = term.renewal(10.0)
    assert term.valid(10.0) and term.valid(13.9) and not term.valid(14.0)
    term = term.renewal(12.0)  # renewals every retry period keep it valid
    assert term.valid(15.9) and not term.valid(16.0)
    assert term.renewal(11.0).renewed_at == 12.0  # a late report of an older renewal changes nothing
    assert term.age(15.0) == 3.0


def test_a_term_that_ran_out_is_never_valid_again() -> None:
    term = LeaseTerm(DEADLINE).renewal(10.0)
    # A pause: the next renewal began after the deadline. It succeeded (nobody took the lease
    # meanwhile, or somebody took it and handed it back): acting on now would be acting on what
    # was believed before the pause.
    resumed = term.renewal(30.0)
    assert resumed.lapsed and not resumed.valid(30.0)
    assert not resumed.renewal(31.0).valid(31.0)
    # A gate that finds it run out latches it, whatever the election thread reports after.
    seen = term.at(14.5)
    assert seen.lapsed and not seen.renewal(14.6).valid(14.6)
    assert term.at(13.0) is term  # within the deadline: unchanged


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Lapses:
    """What a lapse did (in place of killing processes and ending the test process)."""

    def __init__(self) -> None:
        self.kills = 0
        self.exits = 0

    def stop(self) -> int:
        self.kills += 1
        return 3

    def exit(self) -> None:
        self.exits += 1


def fence(clock: Clock, lapses: Lapses, interval: float = 3600.0) -> Fence:
    f = Fence(
        DEADLINE, lease="ns/l", stop_processes=lapses.stop, exit=lapses.exit, clock=clock, interval=interval
    )
    f.renewed(clock.now)
    f.arm()
    return f


def test_a_gate_after_a_pause_kills_the_processes_and_exits_once(caplog: pytest.LogCaptureFixture) -> None:
    clock, lapses = Clock(), Lapses()
    f = fence(clock, lapses)
    f.check("helm upgrade")  # held: passes
    clock.now += 1.0
    f.renewed(clock.now)
    clock.now += 3.5
    f.check("helm upgrade")  # 3.5 s after the last renewal began: still within the deadline
    assert lapses.kills == lapses.exits == 0

    clock.now += 20.0  # the process was frozen; the election thread has not run since
    with pytest.raises(LeaseLost, match="refused helm upgrade: this replica does not hold Lease ns/l"):
        f.check("helm upgrade")
    assert (lapses.kills, lapses.exits) == (1, 1)
    assert "last renewed 23.5s ago (renew deadline 4s)" in caplog.text
    assert "refused helm upgrade, killed the 3 process(es)" in caplog.text

    # The election thread resumes and renews (nobody took the lease): still refused, not redone.
    f.renewed(clock.now)
    with pytest.raises(LeaseLost):
        f.check("PATCH /apis/x/v1/namespaces/ns/xs/a/status")
    assert (lapses.kills, lapses.exits) == (1, 1)


def test_the_watcher_acts_on_a_lapse_when_no_gate_is_reached() -> None:
    clock, lapses = Clock(), Lapses()
    fence(clock, lapses, interval=0.01)
    time.sleep(0.1)
    assert lapses.exits == 0  # the clock has not moved: still held
    clock.now += DEADLINE
    deadline = time.monotonic() + 5
    while lapses.exits == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (lapses.kills, lapses.exits) == (1, 1)


def test_the_elections_loss_is_a_lapse_and_a_deliberate_stop_is_not() -> None:
    clock, lapses = Clock(), Lapses()
    fence(clock, lapses).lost()
    assert (lapses.kills, lapses.exits) == (1, 1)

    lapses = Lapses()
    f = fence(clock, lapses)
    f.disarm()  # shutting down on purpose: the lease is about to be handed over
    with pytest.raises(LeaseLost):
        f.check("helm upgrade")
    assert (lapses.kills, lapses.exits) == (0, 0)

    standby = Fence(DEADLINE, lease="ns/l", stop_processes=lapses.stop, exit=lapses.exit, clock=clock)
    with pytest.raises(LeaseLost):  # never held: refused, and nothing to stop
        standby.check("helm upgrade")
    assert (lapses.kills, lapses.exits) == (0, 0)


def test_gates_that_meet_a_lapse_together_wait_for_the_one_that_handles_it() -> None:
    clock, lapses = Clock(), Lapses()
    release = threading.Event()

    def slow_stop() -> int:
        release.wait(5)
        return lapses.stop()

    f = Fence(DEADLINE, lease="ns/l", stop_processes=slow_stop, exit=lapses.exit, clock=clock, interval=3600)
    f.renewed(clock.now)
    f.arm()
    clock.now += 10
    outcomes: list[str] = []

    def gate() -> None:
        try:
            f.check("a write")
        except LeaseLost:
            outcomes.append(f"refused after {lapses.exits} exit(s)")

    threads = [threading.Thread(target=gate) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    assert outcomes == []  # none returns while the processes are being stopped
    release.set()
    for t in threads:
        t.join(5)
    assert outcomes == ["refused after 1 exit(s)"] * 3 and lapses.kills == 1


def test_api_writes_pass_the_gate_and_reads_do_not() -> None:
    refused: list[str] = []

    def gate(what: str) -> None:
        refused.append(what)
        raise LeaseLost(what)

    cfg = client.Configuration(host="http://127.0.0.1:9")  # nothing listens: a request fails there
    cfg.retries = False
    api = client.CoreV1Api(FencedApiClient(cfg, gate))
    with pytest.raises(LeaseLost):
        api.patch_namespaced_config_map("a", "ns", {"data": {}})
    assert refused == ["PATCH /api/v1/namespaces/ns/configmaps/a"]
    with pytest.raises(HTTPError):  # reached the network: a read is never gated
        api.read_namespaced_config_map("a", "ns", _request_timeout=2)
    assert len(refused) == 1


def test_no_helm_process_starts_past_a_refusing_gate(tmp_path: Path) -> None:
    def gate(what: str) -> None:
        raise LeaseLost(f"refused {what}")

    helm = Helm(HelmSettings(executable="/bin/true", chart_cache=tmp_path / "charts"), gate=gate)
    with pytest.raises(LeaseLost, match="refused helm uninstall"):
        asyncio.run(helm.uninstall("a", "ns", timeout=10, wait=False))
    with pytest.raises(LeaseLost, match="refused helm rollback"):
        asyncio.run(helm.rollback("a", "ns", None, timeout=10, wait=False, history_max=3))
    assert helm.invocations == 0


def test_a_post_render_answered_past_a_refusing_gate_fails_helm_before_it_applies(tmp_path: Path) -> None:
    install(tmp_path)
    script = tmp_path / "bin" / NAME

    def gate(what: str) -> None:
        raise LeaseLost(f"refused {what}: this replica does not hold Lease ns/l")

    async def served() -> tuple[subprocess.CompletedProcess[bytes], Exchange]:
        exchange = Exchange(tmp_path / "calls", argv_for("o", None, "ns", None, NOT_ENFORCED), gate=gate)
        doc = yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
        async with exchange.serving():
            done = await asyncio.to_thread(
                subprocess.run,
                [str(script), *flags_for(exchange.argv, exchange)[3::2]],
                input=doc.encode(),
                capture_output=True,
                timeout=10,
            )
        return done, exchange

    done, exchange = asyncio.run(served())
    assert done.returncode == 1 and done.stdout == b""
    assert b"refused the answer to a post-render: this replica does not hold Lease" in done.stderr
    assert exchange.objects is None


# A stand-in for the operator: it runs the watchdog as the fence does, and a shell that runs a
# sleep (pyhelm3 runs helm through ``sh -c``, and dash does not exec the last command); it renews
# every 0.1 s (the deadline is 0.5 s) at most ``renewals`` times and while the file ``leading``
# exists, then closes the watchdog's input ("close") or keeps it open without renewing ("stop").
_OPERATOR = """
import json, os, subprocess, sys, time
from helm_operator.runtime.watchdog import lease_clock
renewals, then, leading = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dog = subprocess.Popen(
    [sys.executable, "-m", "helm_operator.runtime.watchdog", "--deadline=0.5", f"--parent={os.getpid()}",
     "--lease=ns/l"],
    stdin=subprocess.PIPE,
)
shell = subprocess.Popen(["sh", "-c", "sleep 60; echo never"])
time.sleep(0.3)
sleep = int(subprocess.run(["pgrep", "-P", str(shell.pid)], capture_output=True, text=True).stdout)
print(json.dumps({"watchdog": dog.pid, "shell": shell.pid, "sleep": sleep}), flush=True)
for _ in range(renewals):
    if not os.path.exists(leading):
        break
    dog.stdin.write(f"{lease_clock()!r}\\n".encode())
    dog.stdin.flush()
    time.sleep(0.1)
if then == "close":
    dog.stdin.close()
    print(json.dumps({"watchdog": dog.wait()}), flush=True)
time.sleep(30)
"""


def _operator(tmp_path: Path, renewals: int, then: str) -> tuple[subprocess.Popen[str], dict[str, int]]:
    (tmp_path / "leading").touch()
    proc = subprocess.Popen(
        [sys.executable, "-c", _OPERATOR, str(renewals), then, str(tmp_path / "leading")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as the e2e operator
    )
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_watchdog_kills_what_the_operator_started_when_renewals_stop_then_the_operator(
    tmp_path: Path,
) -> None:
    proc, pids = _operator(tmp_path, renewals=5, then="stop")
    try:
        assert proc.wait(15) == -signal.SIGKILL  # it did not end itself (it has no fence)
    finally:
        proc.kill()
    assert _gone(pids["shell"]) and _gone(pids["sleep"])
    err = proc.stderr.read() if proc.stderr else ""
    said = r"Lease ns/l last renewed 0\.\ds ago \(renew deadline 0\.5s\): the watchdog killed the 2 process"
    assert re.search(said, err), err
    assert "the operator did not end within 1s; killing it" in err


def test_the_watchdog_acts_on_resume_from_a_freeze_at_once(tmp_path: Path) -> None:
    """Frozen with the operator, it wakes on SIGCONT with no renewal to read (another replica
    holds the lease now) and kills at once, not after the time its wait had left."""
    proc, pids = _operator(tmp_path, renewals=300, then="stop")
    try:
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGSTOP)  # the operator, its watchdog and its processes
        (tmp_path / "leading").unlink()
        time.sleep(2.0)
        os.killpg(proc.pid, signal.SIGCONT)
        resumed = time.monotonic()
        while not _gone(pids["sleep"]) and time.monotonic() - resumed < 5:
            time.sleep(0.001)
        took = time.monotonic() - resumed
        assert _gone(pids["sleep"]) and took < 0.2, f"{took:.3f}s"
        print(f"the watchdog killed the sleep {took * 1000:.1f} ms after SIGCONT")
        assert proc.wait(15) == -signal.SIGKILL
    finally:
        proc.kill()


def test_the_watchdog_ends_quietly_with_its_input(tmp_path: Path) -> None:
    proc, pids = _operator(tmp_path, renewals=3, then="close")
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline()) == {"watchdog": 0}
        assert not _gone(pids["sleep"])  # nothing killed: the operator handed the lease over
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize(
    "failure",
    [
        urllib3.exceptions.ReadTimeoutError(None, "/apis/coordination.k8s.io", "read timed out"),  # type: ignore[arg-type]
        urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError()),
        ConnectionRefusedError("refused"),
    ],
    ids=["timeout", "reset", "refused"],
)
def test_a_lease_request_that_times_out_or_loses_its_connection_is_a_failed_attempt_not_the_end(
    failure: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The election library retries only an ApiException: anything else ended its thread, and a
    standby whose Lease read timed out once never competed again (its leader gone, nobody led)."""

    def fails(*args: object, **kwargs: object) -> object:
        raise failure

    monkeypatch.setattr(client.CoordinationV1Api, "read_namespaced_lease", fails)
    leadership = Leadership(client.ApiClient(), LeaderSettings(namespace="ops"), on_lost=lambda: None)
    assert leadership._election.try_acquire_or_renew() is False  # and no exception: tried again next period
