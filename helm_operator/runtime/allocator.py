"""glibc's allocator, told to keep few arenas and to give freed memory back.

glibc gives each thread that allocates an arena of its own, up to eight per core, and memory freed
in one arena is not reused by another. The operator's threads (a watch per dependent kind, the
release index, ``asyncio.to_thread``'s pool, the servers) each keep the high-water mark of what
they once parsed, so resident memory grows with the threads, not with the work. Two arenas serve
the same work. ``trim`` hands the free pages at the top of the heaps back to the kernel after a
burst (a wave of installs parses thousands of bodies that are garbage a second later).

Where the C library is not glibc these are no-ops; ``MALLOC_ARENA_MAX`` in the environment wins
over the default here.
"""

from __future__ import annotations

import ctypes
import os

_M_ARENA_MAX = -8  # mallopt(3)
ARENAS = 2


def _glibc() -> ctypes.CDLL | None:
    """The C library the process already runs on (no ``ldconfig`` lookup at import)."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not all(hasattr(libc, f) for f in ("mallopt", "malloc_trim", "gnu_get_libc_version")):
        return None  # musl and others: their allocators keep no per-thread arenas
    return libc


_LIBC = _glibc()


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's arenas, before the process starts its threads (arenas made earlier stay).
    Whether the cap was set here."""
    if _LIBC is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(_LIBC.mallopt(_M_ARENA_MAX, arenas))


def trim() -> bool:
    """Return the free memory at the top of glibc's heaps to the kernel; whether any was."""
    if _LIBC is None:
        return False
    return bool(_LIBC.malloc_trim(0))
