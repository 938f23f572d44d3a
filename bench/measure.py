"""What the bench reads from the machine: CPU time and memory of a process tree from /proc, the
API server's request counter, and facts about the machine itself.

Parsers are pure functions (unit-tested); the readers around them are thin.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- /proc ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProcStat:
    pid: int
    ppid: int
    utime: int  # clock ticks
    stime: int
    cutime: int  # reaped (waited-for) children, cumulative
    cstime: int
    comm: str = ""


def parse_stat(text: str) -> ProcStat:
    """/proc/<pid>/stat: the command name may hold spaces and parentheses, so fields are counted
    from the last ')'."""
    pid = int(text.split(" ", 1)[0])
    close = text.rindex(")")
    comm = text[text.index("(") + 1 : close]
    rest = text[close + 2 :].split()
    # rest[0] is field 3 (state): ppid is field 4, utime..cstime are fields 14..17.
    return ProcStat(pid, int(rest[1]), int(rest[11]), int(rest[12]), int(rest[13]), int(rest[14]), comm)


def parse_status_kib(text: str, key: str) -> int | None:
    """A ``kB`` line of /proc/<pid>/status (VmRSS, VmHWM)."""
    m = re.search(rf"^{key}:\s+(\d+)\s+kB", text, re.M)
    return int(m.group(1)) if m else None


def read_stat(pid: int) -> ProcStat | None:
    try:
        return parse_stat(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def _all_stats() -> list[ProcStat]:
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (st := read_stat(int(entry.name))):
            out.append(st)
    return out


def process_tree(pid: int, stats: list[ProcStat]) -> list[ProcStat]:
    """The process ``pid`` and all its descendants (empty when it is not among ``stats``)."""
    by_parent: dict[int, list[ProcStat]] = {}
    root = None
    for st in stats:
        by_parent.setdefault(st.ppid, []).append(st)
        if st.pid == pid:
            root = st
    tree: list[ProcStat] = []
    todo = [root] if root else []
    while todo:
        st = todo.pop()
        tree.append(st)
        todo.extend(by_parent.get(st.pid, []))
    return tree


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) of a process, of its reaped children (cutime/cstime) and of
    every descendant still running. None when the process is gone."""
    tree = process_tree(pid, _all_stats())
    if not tree:
        return None
    return sum(st.utime + st.stime + st.cutime + st.cstime for st in tree) / CLK_TCK


def own_cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system, all threads) of one process alone: no child, reaped or running.
    For an operator that runs helm as a child, what the operator itself costs. None when gone."""
    st = read_stat(pid)
    return None if st is None else (st.utime + st.stime) / CLK_TCK


def running_named(pid: int, name: str) -> int:
    """How many descendants of ``pid`` run the program ``name`` right now (e.g. helm)."""
    return sum(1 for st in process_tree(pid, _all_stats())[1:] if st.comm == name)


def rss_mib(pid: int) -> tuple[float | None, float | None]:
    """(current VmRSS, peak VmHWM) of one process in MiB; its children are not included."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None, None
    rss, hwm = parse_status_kib(text, "VmRSS"), parse_status_kib(text, "VmHWM")
    return (rss / 1024 if rss is not None else None, hwm / 1024 if hwm is not None else None)


@dataclass
class Sampler:
    """Samples a process tree every ``interval`` seconds in a thread: (t, CPU % of one core over the
    last interval, RSS MiB). ``pid`` None samples nothing but time (the floor has no process)."""

    pid: int | None
    interval: float = 5.0
    samples: list[tuple[float, float | None, float | None]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-sampler")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def _run(self) -> None:
        t0 = time.monotonic()
        last_t, last_cpu = t0, self._cpu()
        while not self._stop.wait(self.interval):
            now, cpu = time.monotonic(), self._cpu()
            pct = None
            if cpu is not None and last_cpu is not None and now > last_t:
                pct = 100.0 * (cpu - last_cpu) / (now - last_t)
            rss = rss_mib(self.pid)[0] if self.pid else None
            self.samples.append((round(now - t0, 2), pct, rss))
            last_t, last_cpu = now, cpu

    def _cpu(self) -> float | None:
        return tree_cpu_seconds(self.pid) if self.pid else None


def helm_subcommands(invocations: list[str]) -> dict[str, int]:
    """How many helm processes ran each subcommand (``upgrade``, ``version``, ...), from their
    argument lines."""
    counts: dict[str, int] = {}
    for line in invocations:
        word = next((w for w in line.split() if not w.startswith("-")), "?")
        counts[word] = counts.get(word, 0) + 1
    return dict(sorted(counts.items()))


# -- the API server ---------------------------------------------------------------------------
_REQ = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_counter(text: str, name: str) -> float | None:
    """Sum of every sample of counter ``name`` in a Prometheus text exposition (None: absent)."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def parse_request_total(text: str, resource_only: bool = True) -> float:
    """Sum of ``apiserver_request_total`` in a Prometheus text exposition. With ``resource_only``,
    requests to non-resource paths (/metrics, /readyz, /version) are left out: they include the
    bench's own scrapes, not what a contender asks for."""
    return sum(parse_requests(text, resource_only).values())


def parse_requests(text: str, resource_only: bool = True) -> dict[str, float]:
    """``apiserver_request_total`` by verb and resource (``"LIST secrets"``): what a count is made of."""
    by: dict[str, float] = {}
    for line in text.splitlines():
        m = _REQ.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group("labels")))
        if resource_only and not labels.get("resource"):
            continue
        resource = labels.get("resource", "") + (
            f"/{labels['subresource']}" if labels.get("subresource") else ""
        )
        key = f"{labels.get('verb', '?')} {resource}".strip()
        by[key] = by.get(key, 0.0) + float(m.group("value"))
    return by


def grown(first: dict[str, float], mid: dict[str, float], last: dict[str, float]) -> dict[str, list[float]]:
    """Requests by verb and resource in the two halves of a window (three readings of the counter),
    only those made at all."""
    out = {}
    for key in sorted(set(first) | set(mid) | set(last)):
        a, b = mid.get(key, 0.0) - first.get(key, 0.0), last.get(key, 0.0) - mid.get(key, 0.0)
        if a or b:
            out[key] = [a, b]
    return out


# -- the machine --------------------------------------------------------------------------------
def machine_facts() -> dict[str, object]:
    """What a reader needs to judge the numbers: cores, memory, CPU model, load at start."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = None
    with contextlib.suppress(OSError):
        mem_kib = parse_status_kib(Path("/proc/meminfo").read_text(), "MemTotal")
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": model or platform.processor() or "unknown",
        "memory_gib": round(mem_kib / 1024 / 1024, 1) if mem_kib else None,
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "kernel": platform.release(),
        "python": platform.python_version(),
    }
