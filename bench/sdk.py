"""Build the peer contender: the Operator SDK's Helm operator, from its Go module at a pinned tag.

``go install github.com/operator-framework/operator-sdk/cmd/helm-operator@v1.42.3`` is refused by
the module proxy, so the bench writes a tiny wrapper module that requires the pinned version and
names the main package in a ``tools.go`` (never compiled, it only pins the import for ``go mod
tidy``), then ``go build``s the package from there. Any ``replace`` lines of the SDK's own go.mod
are copied into the wrapper (a dependency's replaces are ignored otherwise).

The binary lands in the tools cache outside the repository
(``~/.cache/helm-operator/tools/operator-sdk-helm-operator-<version>/helm-operator``) and is reused
when present, so only the first run pays for the build (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from helm_operator.dev.tools import tools_dir

SDK_MODULE = "github.com/operator-framework/operator-sdk"
SDK_VERSION = "v1.42.3"
SDK_PACKAGE = f"{SDK_MODULE}/cmd/helm-operator"
_VERSION_PKG = f"{SDK_MODULE}/internal/version"


class SdkBuildError(RuntimeError):
    """The SDK's helm-operator could not be built; the message names the log to read."""


def install_dir(version: str = SDK_VERSION) -> Path:
    return tools_dir() / f"operator-sdk-helm-operator-{version}"


def binary(version: str = SDK_VERSION) -> Path:
    return install_dir(version) / "helm-operator"


def is_built(version: str = SDK_VERSION) -> bool:
    return (install_dir(version) / ".complete").is_file() and binary(version).is_file()


def replace_lines(gomod: str) -> list[str]:
    """The ``replace`` directives of a go.mod (single-line and block form) that a consumer can copy:
    those pointing at a module version, not at a directory inside the SDK's own tree."""
    found: list[str] = []
    in_block = False
    for raw in gomod.splitlines():
        line = raw.split("//", 1)[0].strip()
        if in_block:
            if line == ")":
                in_block = False
            elif line:
                found.append(line)
        elif line == "replace (":
            in_block = True
        elif line.startswith("replace "):
            found.append(line.removeprefix("replace ").strip())
    return [r for r in found if not re.search(r"=>\s*\.{1,2}/", r)]


def go_directive(gomod: str) -> str:
    m = re.search(r"^go\s+(\S+)", gomod, re.M)
    return m.group(1) if m else "1.24"


def _go(args: list[str], cwd: Path, log: Path) -> None:
    env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod -buildvcs=false"}
    with log.open("a") as out:
        out.write(f"$ go {' '.join(args)}\n")
        out.flush()
        rc = subprocess.run(["go", *args], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise SdkBuildError(f"`go {' '.join(args[:2])}` failed (exit {rc}); full log {log}:\n{tail}")


def kubernetes_version(gomod: str) -> str:
    """The Kubernetes release the SDK's client-go matches (v0.33.9 -> v1.33.9), as its own release
    build stamps it."""
    m = re.search(r"^\s*k8s.io/client-go\s+v0\.(\S+)", gomod, re.M)
    return f"v1.{m.group(1)}" if m else "unknown"


def _download(workdir: Path, log: Path) -> tuple[str, str]:
    """The SDK's go.mod text and the tag's commit, downloaded into the module cache."""
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{SDK_MODULE}@{SDK_VERSION}"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
    )
    with log.open("a") as f:
        f.write(out.stdout + out.stderr)
    if out.returncode != 0:
        raise SdkBuildError(f"could not download {SDK_MODULE}@{SDK_VERSION}: {out.stderr.strip()[-2000:]}")
    info = json.loads(out.stdout)
    return Path(info["GoMod"]).read_text(), str((info.get("Origin") or {}).get("Hash", "unknown"))


def ensure_built(say: Callable[[str], None] = lambda _m: None) -> Path:
    """Return the path of the built binary, building it first if the cache has none."""
    if is_built():
        return binary()
    if shutil.which("go") is None:
        raise SdkBuildError("the Go toolchain is required to build the SDK's helm-operator (go not on PATH)")
    base = tools_dir()
    base.mkdir(parents=True, exist_ok=True)
    with (base / ".sdk-build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent bench waits instead of building it twice
        if is_built():
            return binary()
        logs = base / "logs"
        logs.mkdir(exist_ok=True)
        log = logs / f"operator-sdk-helm-operator-{SDK_VERSION}.log"
        log.write_text("")
        work = base / ".build" / "operator-sdk-helm-operator"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        say(f"building the Operator SDK helm-operator {SDK_VERSION} (first run only; log {log})")
        sdk_mod, commit = _download(work, log)
        replaces = "".join(f"replace {r}\n" for r in replace_lines(sdk_mod))
        (work / "go.mod").write_text(
            f"module helm-operator.local/sdk-helm-operator-build\n\ngo {go_directive(sdk_mod)}\n\n"
            f"require {SDK_MODULE} {SDK_VERSION}\n\n{replaces}"
        )
        (work / "tools.go").write_text(f'//go:build tools\n\npackage tools\n\nimport _ "{SDK_PACKAGE}"\n')
        partial = install_dir().with_name(install_dir().name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        ldflags = " ".join(
            [
                "-s -w",
                f"-X {_VERSION_PKG}.Version={SDK_VERSION}",
                f"-X {_VERSION_PKG}.GitVersion={SDK_VERSION}",
                f"-X {_VERSION_PKG}.GitCommit={commit}",
                f"-X {_VERSION_PKG}.KubernetesVersion={kubernetes_version(sdk_mod)}",
            ]
        )
        _go(["mod", "tidy"], work, log)
        _go(
            ["build", "-trimpath", "-ldflags", ldflags, "-o", str(partial / "helm-operator"), SDK_PACKAGE],
            work,
            log,
        )
        (partial / ".complete").touch()
        shutil.rmtree(install_dir(), ignore_errors=True)
        partial.rename(install_dir())
        shutil.rmtree(work, ignore_errors=True)
    return binary()


def version_line(path: Path) -> str:
    """What the built binary says about itself (``helm-operator version``)."""
    out = subprocess.run([str(path), "version"], capture_output=True, text=True, timeout=30)
    return (out.stdout or out.stderr).strip()


if __name__ == "__main__":  # build only: python -m bench.sdk
    print(ensure_built(print))
