"""The CLI: config errors stop `run` before any cluster is touched (exit 2); `dev` stops on signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helm_operator.cli.main import main


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "helm_operator.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "KUBECONFIG": "/nonexistent"},
    )


def test_invalid_watches_file_exits_2_with_file_entry_and_field(tmp_path: Path) -> None:
    watches = tmp_path / "watches.yaml"
    watches.write_text("- {group: g, version: v1, kind: A, chart: nowhere}\n")
    proc = run("run", "--watches-file", str(watches))
    assert proc.returncode == 2
    assert (
        f"{watches}: entry 0: field 'chart': no chart directory or .tgz at {tmp_path / 'nowhere'}"
        in proc.stderr
    )


def test_missing_watches_file_exits_2(tmp_path: Path) -> None:
    proc = run("run", "--watches-file", str(tmp_path / "absent.yaml"))
    assert proc.returncode == 2
    assert "cannot read the file" in proc.stderr


def test_the_shipped_watches_file_is_valid() -> None:
    from helm_operator.config.watches import load_watches

    repo = Path(__file__).resolve().parents[2]
    kinds = {w.kind: w for w in load_watches(repo / "watches.yaml")}
    assert set(kinds) == {
        "AppService",
        "MicroServiceDeploy",
        "PostgreSQLCluster",
        "EtcdCluster",
        "Memcached",
        "Nginx",
        "RedisEnterpriseCluster",
    }
    assert kinds["Nginx"].plural is None  # resolved against the API server at start-up


def test_unknown_hook_module_or_bad_hook_exits_2_naming_it(tmp_path: Path) -> None:
    """Hook modules load before any cluster is contacted: the error names the module, or the file,
    line and function."""
    chart = Path(__file__).resolve().parents[2] / "charts/memcached"
    watches = tmp_path / "watches.yaml"
    watches.write_text(f"- {{group: g, version: v1, kind: A, chart: {chart}, hooks: no_such.hooks}}\n")
    proc = run("run", "--watches-file", str(watches))
    assert proc.returncode == 2
    assert "helm-operator: invalid hooks: hook module 'no_such.hooks' not found" in proc.stderr

    (tmp_path / "day2.py").write_text(
        "from helm_operator.hooks import Hooks\nhooks = Hooks()\n\n"
        "@hooks.before('install')\ndef check(ctx):\n    pass\n"
    )
    watches.write_text(f"- {{group: g, version: v1, kind: A, chart: {chart}, hooks: day2.py}}\n")
    proc = run("run", "--watches-file", str(watches))
    assert proc.returncode == 2
    assert f"{tmp_path / 'day2.py'}:4: function check: a hook must be an `async def`" in proc.stderr


# A shell starts `helm-operator dev up &` with SIGINT ignored; the wait must still end on it.
WAITER = """
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
from helm_operator.dev.devcluster import wait_for_signal
print("waiting", flush=True)
wait_for_signal()
print("stopped", flush=True)
"""


def catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler for ``signum`` (its ``SigCgt`` mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_dev_wait_ends_on_signal_even_when_sigint_was_ignored(signum: int) -> None:
    waiter = subprocess.Popen(
        [sys.executable, "-c", WAITER], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2]
    )
    assert waiter.stdout is not None
    assert waiter.stdout.readline().strip() == "waiting"
    deadline = time.monotonic() + 10  # "waiting" is printed just before the handlers are installed
    while not catches(waiter.pid, signum) and time.monotonic() < deadline:
        time.sleep(0.01)
    waiter.send_signal(signum)
    try:
        out, _ = waiter.communicate(timeout=10)
    finally:
        waiter.kill()
    assert waiter.returncode == 0
    assert out.strip() == "stopped"


def test_version_flag() -> None:
    from helm_operator import __version__

    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"helm-operator {__version__}"


def test_a_missing_helm_is_a_start_up_error(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    chart.mkdir()
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: c\nversion: 0.1.0\n")
    watches = tmp_path / "watches.yaml"
    watches.write_text("- {group: g.example.com, version: v1, kind: A, chart: chart}\n")
    proc = run("run", "--watches-file", str(watches), "--helm", str(tmp_path / "no-helm"))
    assert proc.returncode == 2, proc
    assert f"the helm executable '{tmp_path / 'no-helm'}' (--helm) is not found" in proc.stderr
    bare = run("run", "--watches-file", str(watches))  # PATH=/usr/bin:/bin has no helm
    assert bare.returncode == 2 and "'helm' (PATH) is not found" in bare.stderr, bare.stderr


def test_an_api_server_that_cannot_be_reached_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """Start-up talks to the API server (discovery) before anything runs: when it cannot be
    reached, the operator says where and why in one line and exits 1 (its Pod restarts)."""
    import socket

    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    chart = tmp_path / "chart"
    chart.mkdir()
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: c\nversion: 0.1.0\n")
    watches = tmp_path / "watches.yaml"
    watches.write_text("- {group: g.example.com, version: v1, kind: A, chart: chart}\n")
    proc = run("run", "--watches-file", str(watches), "--kubeconfig", str(kubeconfig), "--helm", "/bin/true")
    assert proc.returncode == 1, proc
    assert "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(
        f"helm-operator: cannot reach the Kubernetes API server at https://127.0.0.1:{port}: "
    ), line
    assert line.endswith(f"Connection refused (credentials: {kubeconfig})"), line


def test_a_report_cut_short_by_its_reader_ends_quietly() -> None:
    """`helm-operator rollout status | head -3`: the reader goes away, the command ends as a Unix
    tool does (no BrokenPipeError traceback on stderr)."""
    many = "from helm_operator.cli.main import main\nfor _ in range(300): main(['rollout', 'crd'])\n"
    proc = subprocess.run(
        f'{sys.executable} -c "{many}" | head -1',
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )
    assert proc.stdout == "apiVersion: apiextensions.k8s.io/v1\n" and proc.stderr == "", proc.stderr[-500:]
    # In process (as the tests and anyone embedding the CLI call it): no signal disposition changed.
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
    main(["rollout", "crd"])
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
