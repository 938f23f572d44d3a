"""The progress display: one line per step on stderr, with the run's elapsed time, so a reader of
a CI log (or a terminal) always knows what the bench is doing and how long each step took.

On a terminal the "started" line is rewritten in place by the step's result; in a log both stay,
so a step that hangs is visible as the last line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


class Step:
    def __init__(self) -> None:
        self.result = ""

    def done(self, result: str) -> None:
        """What the step measured, shown on its line."""
        self.result = result


class Progress:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic()
        self.tty = self.stream.isatty()

    def _stamp(self) -> str:
        s = int(time.monotonic() - self.t0)
        return f"[{s // 60:02d}:{s % 60:02d}]"

    def say(self, message: str) -> None:
        self.stream.write(f"{self._stamp()} {message}\n")
        self.stream.flush()

    @contextmanager
    def step(self, label: str) -> Iterator[Step]:
        step = Step()
        started = time.monotonic()
        self.stream.write(f"{self._stamp()} {label} ...{chr(13) if self.tty else chr(10)}")
        self.stream.flush()
        try:
            yield step
        except BaseException as exc:
            took = time.monotonic() - started
            self.stream.write(f"{self._stamp()} {label}: FAILED after {took:.1f}s: {exc!s:.300}\n")
            self.stream.flush()
            raise
        took = time.monotonic() - started
        tail = f": {step.result}" if step.result else ""
        self.stream.write("\x1b[2K" if self.tty else "")
        self.stream.write(f"{self._stamp()} {label}{tail} ({took:.1f}s)\n")
        self.stream.flush()
