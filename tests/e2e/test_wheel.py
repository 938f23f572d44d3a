"""``pip install`` of the project, outside the checkout, is a working operator.

A fresh virtualenv (no system site-packages: a missing dependency must fail here) gets the project
installed from a copy of the checkout, as a user would (``pip install .``); the operator then runs
from a folder holding only watches.yaml, charts/ and hooks/, with nothing of the source tree on its
path: the post-renderer, the hooks' library and everything else must come from the install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from helm_operator.core.naming import OWNER_LABEL
from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain

from .operator import REPO, eventually
from .test_deploy import case_of, resource_of, samples, wait_all_ready

# What a clone has that an install must not rely on (top level), and caches anywhere.
_NOT_SOURCE = {".git", ".venv", "build", "dist", "bench", "tests", "config"}
_CACHES = shutil.ignore_patterns("__pycache__", ".*_cache", "*.egg-info")


def _ignore(folder: str, names: list[str]) -> set[str]:
    top = _NOT_SOURCE & set(names) if Path(folder) == REPO else set()
    return top | set(_CACHES(folder, names))


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with the project installed (not editable) from a copy of the checkout."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=_ignore)  # a stale build/ cannot leak into the wheel
    env = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=120)
    started = time.monotonic()
    proc = subprocess.run(
        [str(env / "bin/pip"), "install", "--quiet", "--no-compile", str(source)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=root,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(f"pip install took {time.monotonic() - started:.0f}s")
    return env


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, **extra}


def test_the_install_is_self_contained(venv: Path, tmp_path: Path) -> None:
    where = subprocess.run(
        [str(venv / "bin/python"), "-c", "import helm_operator; print(helm_operator.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_clean_env(),
        check=True,
    ).stdout.strip()
    assert where.startswith(str(venv)), where
    assert Path(where).with_name("py.typed").is_file()

    dev = subprocess.run(
        [str(venv / "bin/helm-operator"), "dev", "up"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_clean_env(),
    )
    assert dev.returncode == 1 and "Traceback" not in dev.stderr, dev.stderr
    assert "works from a checkout of the helm-operator repository" in dev.stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """watches.yaml, charts/ and hooks/ copied away from the checkout (relative paths kept)."""
    folder = tmp_path / "my-operator"
    folder.mkdir()
    shutil.copy(REPO / "watches.yaml", folder / "watches.yaml")
    for sub in ("charts", "hooks"):
        shutil.copytree(REPO / sub, folder / sub, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


@pytest.mark.timeout(900)
def test_installed_operator_serves_the_samples(
    venv: Path,
    project: Path,
    cluster: DevCluster,
    crds: None,
    tools: Toolchain,
    solo_namespace: str,
    tmp_path: Path,
) -> None:
    namespace = solo_namespace  # its own operator: no shared operator watches s-*
    tools.require("helm")
    log = tmp_path / "operator.log"
    home = tmp_path / "home"
    cmd = [
        str(venv / "bin/helm-operator"),
        "run",
        "--helm",
        str(tools.helm),
        "--watches-file",
        "watches.yaml",
    ]
    cmd += ["--kubeconfig", str(cluster.kubeconfig), "--namespace", namespace, "--retry-base", "1"]
    env = _clean_env(
        HOME=str(home),
        HELM_CACHE_HOME=str(home / "helm/cache"),
        HELM_CONFIG_HOME=str(home / "helm/config"),
        HELM_DATA_HOME=str(home / "helm/data"),
    )
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        eventually(
            lambda: "Initial authentication has finished" in log.read_text() or proc.poll() is not None,
            timeout=60,
            what="operator start",
        )
        assert proc.poll() is None, log.read_text()
        crs = samples()
        cluster.kubectl("apply", "-n", namespace, "-f", str(REPO / "samples"))
        wait_all_ready(cluster, namespace, crs)
        # The installed post-renderer ran: rendered objects carry the owner label.
        for cr in crs:
            kind, name = case_of(cr).workload[0], cr["metadata"]["name"]
            labels = json.loads(cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json").stdout)
            assert OWNER_LABEL in labels["metadata"].get("labels", {}), f"{kind}/{name}: not post-rendered"
        for cr in crs:
            cluster.kubectl(
                "delete", resource_of(cr), cr["metadata"]["name"], "-n", namespace, "--wait=false"
            )
        for cr in crs:
            ref = f"{resource_of(cr)}/{cr['metadata']['name']}"
            cluster.kubectl("wait", "--for=delete", ref, "-n", namespace, "--timeout=180s", timeout=190)
    except BaseException:
        print(log.read_text()[-20000:])
        raise
    finally:
        proc.terminate()
        proc.wait(150)
    text = log.read_text()
    for missing in ("ModuleNotFoundError", "ImportError", "FileNotFoundError", "No such file"):
        assert missing not in text, text[-5000:]  # what an incomplete install looks like
    assert yaml.safe_load((project / "watches.yaml").read_text())  # the copy was used, untouched
