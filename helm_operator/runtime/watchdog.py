"""A second process that stops a lapsed leader's helm processes sooner than the leader can.

After a pause every thread of the operator resumes at once and each wants Python's GIL: the
fence's own watcher waited 20-75 ms for it in the e2e test, while a helm process that had been
waiting for its objects wrote its release 60-160 ms after resuming. This process has one thread
and nothing else to do. It sleeps until the renew deadline of the last renewal it was told of;
woken past it (a pause, or renewals that stopped) it SIGKILLs every process the operator started
but itself, in about a millisecond, says so (in the operator's log format), and leaves the
operator to its own fence (which exits it, as a leader that cannot renew does). An operator still
running a second later is killed too. It narrows what a resumed helm process does, and cannot
close the race on a busy node (both resume at once on different cores): helm's writes are refused
by the relay it sends them through (``adapters/relay.py``).

The operator tells it each renewal that succeeded: a line on its stdin with the lease clock
reading its attempt began. The same :class:`~helm_operator.core.lease.LeaseTerm` decides, on the
same system-wide clock. End of input (the operator ended, or handed the lease over) ends it
quietly; it ignores the signals a terminal or a process-group kill sends, and follows its input.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Sequence

from helm_operator.core.lease import LeaseTerm
from helm_operator.runtime import logs

log = logging.getLogger("helm_operator.runtime.watchdog")  # not __main__ when run with -m

GRACE = 1.0  # seconds the operator has to end itself once its helm processes were killed


def lease_clock() -> float:
    """A monotonic clock that also counts time the machine was suspended (CLOCK_BOOTTIME), the
    same in every process: a suspended node is a pause like any other."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.monotonic()


def kill_descendants(root: int, spare: int | None = None) -> int:
    """SIGKILL every descendant of ``root`` (helm, the shell pyhelm3 runs it through, its
    post-renderer) but ``spare``, the deepest first; returns how many there were.

    SIGKILL, not SIGTERM: a helm that goes on completes its release as a leader that no longer
    is one, and one stopped with SIGTERM still writes (it marks its release failed). Killed, it
    leaves the release ``pending-*``, which the new leader unlocks.
    """
    parents = {}  # pid -> ppid of every process (os.open: ten times faster than open())
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
            try:
                stat = os.read(fd, 1024)
            finally:
                os.close(fd)
        except OSError:
            continue
        parents[int(name)] = int(stat.rsplit(b")", 1)[1].split()[1])  # the field after "(comm) state"
    found: list[int] = []
    level = {root}
    while level:
        level = {pid for pid, ppid in parents.items() if ppid in level and pid != spare}
        found += sorted(level)
    for pid in reversed(found):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(found)


def watch(
    deadline: float,
    parent: int,
    lease: str,
    *,
    fd: int = 0,
    clock: Callable[[], float] = lease_clock,
    grace: float = GRACE,
) -> int:
    """The watchdog's loop: 0 once its input ends, 1 after it acted on a lapse."""
    term, pending = LeaseTerm(deadline), b""
    # poll, not select: a select stopped by SIGSTOP is restarted on SIGCONT with the time it had
    # left, so it would sleep the length of the pause again; poll restarts with its end time.
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        timeout = None if term.renewed_at is None else max(0.0, term.renewed_at + deadline - clock())
        if poller.poll(None if timeout is None else timeout * 1000):
            chunk = os.read(fd, 4096)
            if not chunk:
                return 0
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                term = term.renewal(float(line))
        term = term.at(clock())
        if term.lapsed:
            break
    killed = kill_descendants(parent, spare=os.getpid())
    log.error(
        "leader election: Lease %s last renewed %.1fs ago (renew deadline %gs): the watchdog killed "
        "the %d process(es) the operator started; its fence ends it",
        lease,
        term.age(clock()) or 0.0,
        deadline,
        killed,
    )
    time.sleep(grace)
    if os.getppid() == parent:  # still there (and not another process that got its pid)
        log.error("leader election: the operator did not end within %gs; killing it", grace)
        os.kill(parent, signal.SIGKILL)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helm_operator.runtime.watchdog")
    parser.add_argument("--deadline", type=float, required=True, help="the renew deadline, seconds")
    parser.add_argument("--parent", type=int, required=True, help="the operator's pid")
    parser.add_argument("--lease", default="", help="namespace/name, for messages")
    parser.add_argument("--log-format", default="text", choices=("text", "json"))
    args = parser.parse_args(argv)
    logs.setup(logging.INFO, args.log_format)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    return watch(args.deadline, args.parent, args.lease)


if __name__ == "__main__":
    sys.exit(main())
