"""Finding and stopping the processes a local cluster or its real node started (by what their
command lines name: the cluster's folder), including those of a run that was killed."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """Whether the process runs: a zombie (exited, not yet reaped by its parent) does not, though
    signal 0 still reaches it — a test runner killed under its parent would otherwise keep its
    clusters from ever being reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # "pid (comm) state …": comm may hold spaces and parentheses; the state follows the last ")".
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def pids_referencing(path: Path | str) -> list[int]:
    """Processes (other than this one) whose command line mentions ``path``."""
    needle = str(path).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def kill(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def kill_all(pids: list[int], grace: float = 5.0) -> None:
    """SIGTERM, up to ``grace`` seconds to exit, then SIGKILL."""
    kill(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.1)
    kill(pids)
