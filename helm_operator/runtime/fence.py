"""Acting only while the lease is held: the gate of every helm process and every API write.

The election thread records each renewal that succeeded (:class:`~helm_operator.core.lease.
LeaseTerm`); every gate — a helm process about to start, its post-render about to be answered, a
write about to be sent to the API server — calls :meth:`Fence.check`, which reads the clock itself.
After a pause (a frozen Pod, a stopped process, a starved node) the threads and the event loop
resume in any order: a flag the election thread clears later would still say "leading" to
whichever runs first, and the clock does not.

A helm process sends its requests through the operator (``adapters/relay.py``), whose every write
passes the same gate: one that resumes after a pause and writes first is refused there, whichever
process the node ran first. A lapse is also looked for where no gate is reached (a helm process
waiting for its objects): by a watcher thread ten times a second, and — because after a pause that
thread waits for the GIL with every other one — by a watchdog process (``watchdog.py``) that kills
the helm processes first.

On a lapse the fence, once: SIGKILLs every process the operator started (a helm that completes
now writes as a leader that no longer is one), says why, and ends the process as a leader that
cannot renew does (its Pod restarts as a standby). A release left ``pending-*`` by the kill is what
the new leader unlocks. Any other gate reached meanwhile waits for that end: it neither acts nor
returns to a caller that would write about the refusal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any, NoReturn

from kubernetes import client

from helm_operator.core.lease import Gate, LeaseLost, LeaseTerm
from helm_operator.runtime import logs
from helm_operator.runtime.watchdog import kill_descendants, lease_clock

log = logging.getLogger(__name__)

WATCH_INTERVAL = 0.1  # seconds between the watcher's checks (a paused process checks on resume)
_READS = frozenset({"GET", "HEAD", "OPTIONS"})


def exit_now(code: int = 1) -> NoReturn:
    """End the process at once, its log lines and output written out: no cleanup that could act
    (a lapsed lease: the Pod restarts it as a standby), and no interpreter finalization, where a
    daemon thread holding stderr's lock makes CPython abort (SIGABRT after a clean stop)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _kill_own_processes() -> int:
    return kill_descendants(os.getpid())


class Fence:
    """The lease term, the gates that ask it, and what a lapse does. ``watchdog``: also run the
    watchdog process while leading (the operator does; tests of the fence alone do not)."""

    def __init__(
        self,
        deadline: float,
        *,
        lease: str,
        stop_processes: Callable[[], int] = _kill_own_processes,
        exit: Callable[[], None] = exit_now,
        clock: Callable[[], float] = lease_clock,
        interval: float = WATCH_INTERVAL,
        watchdog: bool = False,
    ) -> None:
        self.lease = lease  # "namespace/name", for messages
        self._term = LeaseTerm(float(deadline))
        self._stop_processes = stop_processes
        self._exit = exit
        self._clock = clock
        self._interval = interval
        self._lock = threading.Lock()  # guards the term and the watchdog's input
        self._lapsing = threading.Lock()  # held by the one caller that handles a lapse
        self._armed = False
        self._handled = False
        self._stopped = threading.Event()
        self._use_watchdog = watchdog
        self._watchdog: subprocess.Popen[bytes] | None = None

    def renewed(self, began: float) -> None:
        """A renewal (or the acquisition) that began at ``began`` on :func:`lease_clock` succeeded."""
        with self._lock:
            self._term = self._term.renewal(began)
            self._tell(began)

    def arm(self) -> None:
        """This replica leads: from now on a lapse stops it (and the watchers look for one)."""
        with self._lock:
            self._armed = True
            if self._use_watchdog:
                self._start_watchdog()
        threading.Thread(target=self._watch, name="lease-fence", daemon=True).start()

    def disarm(self) -> None:
        """A deliberate shutdown hands the lease over: every gate refuses from now on, and nothing
        is killed (the actions in flight have ended)."""
        self._stopped.set()
        with self._lock:
            self._armed = False
            self._term = LeaseTerm(self._term.deadline, self._term.renewed_at, lapsed=True)
            watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None and watchdog.stdin is not None:
            watchdog.stdin.close()  # its end of input: it exits
            try:
                watchdog.wait(5)
            except subprocess.TimeoutExpired:
                watchdog.kill()

    def check(self, what: str) -> None:
        """The gate: returns if this replica may do ``what`` now."""
        with self._lock:
            now = self._clock()
            self._term = term = self._term.at(now)
            armed = self._armed
        if term.valid(now):
            return
        if armed:
            self._lapse(what, term.age(now))
        raise LeaseLost(f"refused {what}: this replica does not hold Lease {self.lease}")

    def lost(self) -> None:
        """The election gave the lease up (it could not renew within the renew deadline)."""
        with self._lock:
            self._term = LeaseTerm(self._term.deadline, self._term.renewed_at, lapsed=True)
            age = self._term.age(self._clock())
        self._lapse("anything more (the lease could not be renewed)", age)

    def _watch(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self.check("anything more")
            except LeaseLost:
                return

    def _lapse(self, what: str, age: float | None) -> None:
        with self._lapsing:  # the first caller acts and ends the process; the others wait here
            if self._handled:
                return
            self._handled = True
            killed = self._stop_processes()  # first: a helm that resumed must not get further
            since = f"{age:.1f}s ago" if age is not None else "never"
            log.error(
                "leader election: Lease %s last renewed %s (renew deadline %gs): this replica may "
                "have been superseded; refused %s, killed the %d process(es) it started (helm and "
                "its shells), exiting so that only the new leader acts",
                self.lease,
                since,
                self._term.deadline,
                what,
                killed,
            )
            self._exit()

    def _start_watchdog(self) -> None:
        json_logs = any(isinstance(h.formatter, logs.JsonFormatter) for h in logging.getLogger().handlers)
        command = [sys.executable, "-m", "helm_operator.runtime.watchdog"]
        command += [f"--deadline={self._term.deadline:g}", f"--parent={os.getpid()}", f"--lease={self.lease}"]
        command.append(f"--log-format={'json' if json_logs else 'text'}")
        try:
            self._watchdog = subprocess.Popen(command, stdin=subprocess.PIPE)
        except OSError as exc:
            log.warning("leader election: no lease watchdog (%s); the fence alone guards", exc)
            return
        assert self._watchdog.stdin is not None
        os.set_blocking(self._watchdog.stdin.fileno(), False)  # a gate never waits for it
        if self._term.renewed_at is not None:
            self._tell(self._term.renewed_at)

    def _tell(self, began: float) -> None:
        """One renewal to the watchdog (under the lock: in order, and never after it was closed)."""
        watchdog = self._watchdog
        if watchdog is None or watchdog.stdin is None:
            return
        try:
            watchdog.stdin.write(f"{began!r}\n".encode())
            watchdog.stdin.flush()
        except (OSError, ValueError) as exc:
            log.warning("leader election: the lease watchdog is gone (%s); the fence alone guards", exc)
            self._watchdog = None


class FencedApiClient(client.ApiClient):
    """The kubernetes client of every adapter: a request that writes (status, Events, drift
    corrections, hook objects, Helm's storage unlocked, finalizers…) passes the gate first, as
    late as it can be checked; reads never wait for it."""

    def __init__(self, configuration: client.Configuration, gate: Gate) -> None:
        super().__init__(configuration)
        self._gate = gate

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if str(method).upper() not in _READS:
            self._gate(f"{method} {urllib.parse.urlsplit(url).path}")
        return super().call_api(method, url, *args, **kwargs)
