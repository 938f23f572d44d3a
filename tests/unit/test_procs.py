"""A local cluster's owner is alive only while its process runs (a zombie does not)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from helm_operator.dev.procs import pid_alive


def test_a_running_process_is_alive_an_exited_unreaped_one_is_not_nor_a_reaped_one() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert pid_alive(child.pid)
        child.kill()
        deadline = time.monotonic() + 10
        # Killed but not waited for: a zombie, which signal 0 still reaches.
        while (
            time.monotonic() < deadline
            and os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        ):
            time.sleep(0.05)
        os.kill(child.pid, 0)  # the zombie is there
        assert not pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid)
