"""The Python environment our operator runs in during a run: its runtime dependencies only.

The image (see the Dockerfile) installs the package with its runtime dependencies and nothing
else. The bench's own environment also holds the test extras, and one of them (matplotlib, for the
plots) brings numpy, which deepdiff imports whenever it is importable: ~10 MiB of RSS and import
time the deployed operator never has. So ours runs from a virtualenv with exactly the runtime
dependencies of ``pyproject.toml``, at the versions installed here (a constraints file from this
environment), and the package itself from the checkout (``PYTHONPATH``).

The virtualenv lives in the tools cache, outside the repository, keyed by the interpreter and the
pinned versions; a run with the same ones reuses it (the first costs a ``pip install`` from the
package registry, ~30 s).
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from helm_operator.dev.tools import REPO_ROOT, tools_dir


class RuntimeEnvError(RuntimeError):
    """The runtime-only virtualenv could not be made; the message names the log to read."""


def requirements(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[str]:
    """The runtime dependencies, as written in ``[project] dependencies``."""
    return list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    if match is None:
        raise RuntimeEnvError(f"pyproject.toml: cannot read a package name from {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def closure(names: list[str]) -> dict[str, str]:
    """Every distribution the runtime dependencies pull in, as installed here: name -> version."""
    found: dict[str, str] = {}
    todo = [_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise RuntimeEnvError(
                f"{name}, a runtime dependency, is not installed: run `make venv`"
            ) from None
        found[name] = dist.version
        for req in dist.requires or []:
            if "extra ==" in req:
                continue  # optional extras are not installed by a plain install either
            marker = req.split(";", 1)[1] if ";" in req else ""
            if marker and not _marker_holds(marker):
                continue
            todo.append(_name(req))
    return found


def _marker_holds(marker: str) -> bool:
    from packaging.markers import Marker

    return bool(Marker(marker.strip()).evaluate())


def python(say: Callable[[str], None] = lambda _: None) -> str:
    """The interpreter of the runtime-only virtualenv, made on first use."""
    pins = closure(requirements())
    constraints = "".join(f"{n}=={v}\n" for n, v in sorted(pins.items()))
    key = hashlib.sha256(f"{sys.version}\n{constraints}".encode()).hexdigest()[:12]
    root = tools_dir() / f"bench-operator-venv-{key}"
    exe = root / "bin" / "python"
    if (root / ".complete").is_file():
        return str(exe)
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs at once make it once
        if (root / ".complete").is_file():
            return str(exe)
        say(f"a virtualenv with the operator's runtime dependencies only ({len(pins)} packages) ...")
        log = root.with_suffix(".log")
        with log.open("w") as out:
            steps = [
                [sys.executable, "-m", "venv", "--clear", str(root)],
                [
                    str(exe),
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "-c",
                    "/dev/stdin",
                    *requirements(),
                ],
            ]
            for step in steps:
                done = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, input=constraints.encode())
                if done.returncode != 0:
                    raise RuntimeEnvError(f"{' '.join(step[:4])} … failed; see {log}")
        (root / ".complete").write_text(constraints)
    return str(exe)
