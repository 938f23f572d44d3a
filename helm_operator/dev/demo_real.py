"""``helm-operator dev demo --real``: the PostgreSQL sample's day-2 on the real node, as a user
lives it — a 3-instance cluster, rows written, a backup taken, a failover, a restore into a new
cluster — each step printed with its evidence and its time, then everything torn down.

The plan, the manifests and the printed lines are pure (unit-tested); :class:`Demo` is the thin
I/O around ``kubectl`` and :func:`run` drives the steps. A step that fails ends the demo with a
message naming it and exit code 1; teardown runs whatever happened.
"""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TextIO, TypeVar

from helm_operator.dev import images
from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.nodeconfig import LABEL, NODE_NAME, TAINT_KEY
from helm_operator.dev.realnode import RealNode
from helm_operator.dev.tools import REPO_ROOT

PG = "postgresqlclusters.postgresql.example.com"
ACTION = "helm-operator.io/action"
SOURCE = "shop"
RESTORED = "shop-restored"
FAILOVER_DELAY = "5s"
# What the demo runs on the real node (the sandbox, the backup lister, PostgreSQL): neither etcd's
# image nor the operator's, which is rebuilt after every change to the code (minutes on 2 cores).
IMAGES = (images.PAUSE, images.DEBIAN, images.POSTGRES)
# One real node per machine: another run's is waited for this long before the demo gives up.
LOCK_WAIT = 1200.0

T = TypeVar("T")


@dataclass(frozen=True)
class Step:
    key: str
    title: str


def plan(rows: int) -> tuple[Step, ...]:
    """What the demo does, in order (each step's evidence is printed as it runs)."""
    return (
        Step("cluster", "start the local control plane with one real node (kubelet + containerd)"),
        Step("operator", "run the operator on the shipped watches.yaml"),
        Step("create", f"create PostgreSQLCluster '{SOURCE}': 3 instances placed on the real node"),
        Step("write", f"write {rows} rows into table t on the primary"),
        Step("backup", f"take a backup on request ({ACTION}=backup-now)"),
        Step("failover", "fail over: delete the primary's Pod"),
        Step("restore", f"restore the backup into a new PostgreSQLCluster '{RESTORED}'"),
        Step("teardown", "tear down: the operator, the real node, the control plane"),
    )


# --- what is printed ---------------------------------------------------------------------------


def heading(number: int, total: int, step: Step) -> str:
    return f"[{number}/{total}] {step.title}"


def evidence(text: str) -> str:
    return f"      {text}"


def took(seconds: float) -> str:
    return f"      done in {seconds:.1f} s"


def failure(number: int, total: int, step: Step, reason: str) -> str:
    return f"demo failed at step {number}/{total} ({step.key}: {step.title}): {reason}"


def summary(timings: Iterable[tuple[Step, float]]) -> list[str]:
    """The elapsed time of each step that ran, and their total."""
    done = list(timings)
    width = max((len(s.key) for s, _ in done), default=0)
    lines = ["step times:"]
    lines += [f"  {s.key:<{width}}  {t:7.1f} s" for s, t in done]
    lines.append(f"  {'total':<{width}}  {sum(t for _, t in done):7.1f} s")
    return lines


def size_text(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.1f} kB"


# --- what is applied ---------------------------------------------------------------------------

ON_REAL_NODE: dict[str, Any] = {
    "nodeSelector": {LABEL: "true"},
    "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
}


def postgresql_cluster(name: str, password: str, *, replicas: int, **spec: Any) -> dict[str, Any]:
    """A PostgreSQLCluster of real PostgreSQL 15 instances (the locally built image) on the real
    node: its nodeSelector and toleration, and ``imagePullPolicy: Never`` (there is no registry)."""
    return {
        "apiVersion": "postgresql.example.com/v1",
        "kind": "PostgreSQLCluster",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "version": "15",
            "storage": "1Gi",
            "imageRepository": images.POSTGRES.rsplit(":", 1)[0],
            "imagePullPolicy": "Never",
            "auth": {"password": password},
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "1Gi"}},
            "postgresqlConf": {"shared_buffers": "32MB", "wal_keep_size": "64MB"},
            **ON_REAL_NODE,
            **spec,
        },
    }


def lister_pod(name: str, claim: str) -> dict[str, Any]:
    """A Pod on the real node that lists the files on a claim (name and size, one a line)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            **ON_REAL_NODE,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": images.DEBIAN,
                    "imagePullPolicy": "Never",
                    "command": ["find", "/b", "-maxdepth", "1", "-type", "f", "-printf", "%f %s\\n"],
                    "volumeMounts": [{"name": "b", "mountPath": "/b", "readOnly": True}],
                }
            ],
            "volumes": [{"name": "b", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}],
        },
    }


def listing(text: str) -> dict[str, int]:
    """``find -printf '%f %s\\n'`` output as file name → size."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


# --- I/O ---------------------------------------------------------------------------------------


class StepFailed(RuntimeError):
    """A step did not reach its goal; the message says what was expected and what was seen."""


@dataclass
class Demo:
    """kubectl against the demo's cluster, in its namespace."""

    cluster: DevCluster
    ns: str
    password: str = field(default_factory=lambda: secrets.token_hex(12), repr=False)

    def kubectl(
        self, *args: str, input: str | None = None, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        out = self.cluster.kubectl("-n", self.ns, *args, input=input, timeout=timeout, check=False)
        if check and out.returncode != 0:
            raise StepFailed(f"kubectl {' '.join(args[:3])} failed: {(out.stderr or out.stdout).strip()}")
        return out

    def apply(self, doc: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(doc))

    def get(self, kind: str, name: str) -> dict[str, Any]:
        out = self.kubectl("get", kind, name, "-o", "json", check=False)
        return dict(json.loads(out.stdout)) if out.returncode == 0 else {}

    def day2(self, name: str) -> dict[str, Any]:
        return dict((self.get(PG, name).get("status") or {}).get("day2") or {})

    def ready(self, name: str) -> bool:
        obj = self.get(PG, name)
        generation = obj.get("metadata", {}).get("generation")
        return any(
            c.get("type") == "Ready"
            and c.get("status") == "True"
            and c.get("observedGeneration") == generation
            for c in (obj.get("status") or {}).get("conditions", [])
        )

    def sql(self, pod: str, query: str, timeout: float = 120, check: bool = True) -> str:
        """A query in an instance over its local socket, as the superuser; the unaligned result."""
        out = self.kubectl(
            "exec", pod, "-c", "postgres", "--",
            "psql", "-h", "/var/run/postgresql", "-U", "postgres", "-d", "app", "-v", "ON_ERROR_STOP=1",
            "-tAc", query,
            timeout=timeout, check=check,
        )  # fmt: skip
        return out.stdout.strip() if out.returncode == 0 else ""

    def sql_through_service(self, pod: str, service: str, query: str) -> str:
        """A query as a client sends it: through the cluster's Service, with the password (given
        on stdin, never on a command line)."""
        script = (
            'read -r PGPASSWORD; export PGPASSWORD; exec psql "host=$0 user=postgres dbname=app" -tAc "$1"'
        )
        out = self.kubectl(
            "exec", "-i", pod, "-c", "postgres", "--", "bash", "-c", script, service, query,
            input=self.password + "\n",
        )  # fmt: skip
        return out.stdout.strip()

    def pod_ips(self) -> dict[str, str]:
        pods = json.loads(self.kubectl("get", "pods", "-o", "json").stdout)["items"]
        return {p["status"].get("podIP", ""): p["metadata"]["name"] for p in pods}

    def files_on(self, claim: str) -> dict[str, int]:
        name = f"ls-{secrets.token_hex(2)}"
        self.apply({**lister_pod(name, claim), "metadata": {"name": name, "namespace": self.ns}})

        def finished() -> str:
            phase = str((self.get("pod", name).get("status") or {}).get("phase") or "")
            return phase if phase in ("Succeeded", "Failed") else ""

        phase = wait(finished, 120, f"the Pod listing {claim} to finish")
        log = self.kubectl("logs", name).stdout
        self.kubectl("delete", "pod", name, "--wait=false", check=False)
        if phase != "Succeeded":
            raise StepFailed(f"listing {claim} failed: {log.strip()}")
        return listing(log)


def wait(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.5) -> T:
    """``check()``'s first truthy result within ``timeout`` seconds, else :class:`StepFailed`."""
    deadline = time.monotonic() + timeout
    last = check()
    while not last:
        if time.monotonic() > deadline:
            raise StepFailed(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
        time.sleep(interval)
        last = check()
    return last


@contextmanager
def operator_process(cluster: DevCluster, watches: Path, namespace: str, log: IO[str]) -> Iterator[None]:
    """``helm-operator run`` on the watches file, serving one namespace, while the block runs."""
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "helm_operator.cli", "run",
            "--helm", str(cluster.tools.helm),
            "--watches-file", str(watches),
            "--kubeconfig", str(cluster.kubeconfig),
            "--namespace", namespace,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(150)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- the steps ---------------------------------------------------------------------------------


class Run:
    """The steps' shared state: what the earlier steps found that the later ones use."""

    def __init__(self, demo: Demo, rows: int, say: Callable[[str], None]) -> None:
        self.demo = demo
        self.rows = rows
        self.say = say
        self.primary = ""
        self.backup = ""

    def create(self) -> None:
        d = self.demo
        d.apply(postgresql_cluster(SOURCE, d.password, replicas=3, failoverDelay=FAILOVER_DELAY))
        self.say(f"kubectl apply: PostgreSQLCluster {SOURCE} (replicas 3, failoverDelay {FAILOVER_DELAY})")
        wait(lambda: d.ready(SOURCE), 600, f"{SOURCE} Ready")
        self.primary = wait(lambda: d.day2(SOURCE).get("currentPrimary"), 120, "a primary")
        pods = json.loads(d.kubectl("get", "pods", "-l", f"app.kubernetes.io/instance={SOURCE}", "-o", "json")
                          .stdout)["items"]  # fmt: skip
        where = sorted({p["spec"].get("nodeName", "") for p in pods})
        self.say(f"Ready: {len(pods)} Pods on node(s) {', '.join(where)}; primary {self.primary}")
        if where != [NODE_NAME]:
            raise StepFailed(f"the instances run on {where}, not only on the real node {NODE_NAME!r}")
        streaming = "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
        wait(lambda: d.sql(self.primary, streaming, check=False) == "2", 180, "2 standbys streaming")
        self.say(f"2 standbys stream WAL from {self.primary} (pg_stat_replication)")

    def write(self) -> None:
        d = self.demo
        d.sql(self.primary, "CREATE TABLE t (id int PRIMARY KEY, v text); "
              f"INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, {self.rows}) g")  # fmt: skip
        count = int(d.sql(self.primary, "SELECT count(*) FROM t"))
        self.say(f"SELECT count(*) FROM t on {self.primary}: {count}")
        if count != self.rows:
            raise StepFailed(f"{count} rows written, {self.rows} expected")

    def take_backup(self) -> None:
        d = self.demo
        d.kubectl("annotate", PG, SOURCE, "--overwrite", f"{ACTION}=backup-now")
        self.say(f"kubectl annotate postgresqlcluster {SOURCE} {ACTION}=backup-now")

        def finished() -> dict[str, Any] | None:
            done = [b for b in d.day2(SOURCE).get("backups", []) if b.get("phase") in ("Succeeded", "Failed")]
            return done[-1] if done else None

        record = wait(finished, 600, "the backup to finish")
        if record["phase"] != "Succeeded":
            raise StepFailed(f"backup {record['name']} failed: {record.get('message', '')}")
        self.backup = str(record["name"])
        self.say(f"status.day2.backups: {self.backup} Succeeded, at {record.get('location', '')}")
        files = d.files_on(f"{SOURCE}-backups")
        file = f"{self.backup}.sql.gz"
        if file not in files:
            raise StepFailed(f"{file} is not on the backup volume: {sorted(files)}")
        self.say(f"on the backup volume: {file}, {size_text(files[file])} (pg_dump, gzip)")

    def failover(self) -> None:
        d = self.demo
        old = self.primary
        d.kubectl("delete", "pod", old, "--wait=false")
        self.say(f"kubectl delete pod {old}")
        started = time.monotonic()
        new = wait(
            lambda: (p := d.day2(SOURCE).get("currentPrimary")) != old and p,
            180,
            "a new primary",
            interval=0.3,
        )
        self.primary = str(new)
        self.say(f"new primary: {new}, {time.monotonic() - started:.1f} s after the deletion")
        wait(lambda: d.sql(self.primary, "SELECT pg_is_in_recovery()", check=False) == "f", 120,
             f"{new} writable")  # fmt: skip
        count = int(d.sql(self.primary, "SELECT count(*) FROM t"))
        self.say(f"SELECT count(*) FROM t on {new}: {count} (unchanged)")
        if count != self.rows:
            raise StepFailed(f"{count} rows on the new primary, {self.rows} before the failover")
        service = f"{SOURCE}.{d.ns}.svc.cluster.local"
        query = "CREATE TABLE IF NOT EXISTS notes (at timestamptz); INSERT INTO notes VALUES (now()); "
        query += "SELECT inet_server_addr()"

        def written() -> str:
            try:
                return d.sql_through_service(self.primary, service, query)
            except StepFailed:
                return ""

        address = wait(written, 120, "a write through the Service", interval=1).splitlines()[-1]
        by = d.pod_ips().get(address.split("/")[0], address)
        self.say(f"a write through Service {SOURCE} (as a client): acknowledged by {by}")

    def restore(self) -> None:
        d = self.demo
        d.apply(postgresql_cluster(RESTORED, d.password, replicas=1, restore={"fromBackup": self.backup}))
        self.say(f"kubectl apply: PostgreSQLCluster {RESTORED} (restore.fromBackup: {self.backup})")
        wait(lambda: d.ready(RESTORED), 600, f"{RESTORED} Ready")
        state = d.day2(RESTORED).get("restore") or {}
        self.say(f"status.day2.restore: {state.get('phase')} from {state.get('from', self.backup)}")
        count = int(d.sql(f"{RESTORED}-0", "SELECT count(*) FROM t"))
        self.say(f"rows: {self.rows} in {SOURCE} when backed up, {count} in {RESTORED}")
        if count != self.rows:
            raise StepFailed(f"{count} rows restored, {self.rows} backed up")


class NodeStart:
    """Splits the real node's start into its phases: waiting for the machine's node (the images are
    asked for once it is ours), the images (built only when their inputs changed), and the node
    joining the cluster."""

    def __init__(self, began: float, archives: Callable[[], Iterable[Path]]) -> None:
        self.began = began
        self._archives = archives
        self.locked: float | None = None
        self.imaged: float | None = None

    def images(self) -> list[Path]:
        self.locked = time.monotonic()
        found = list(self._archives())
        self.imaged = time.monotonic()
        return found

    def lines(self, ended: float) -> list[str]:
        if self.locked is None or self.imaged is None:
            return [f"real node joined in {ended - self.began:.1f} s"]
        waited = self.locked - self.began
        return [
            f"waited {waited:.1f} s for the machine's real node" if waited >= 1 else "the real node was free",
            f"images ready in {self.imaged - self.locked:.1f} s",
            f"real node joined (containerd, kubelet, kube-proxy, CoreDNS) in {ended - self.imaged:.1f} s",
        ]


@contextmanager
def heartbeat(phases: NodeStart, say: Callable[[str], None], every: float = 30.0) -> Iterator[None]:
    """A line every ``every`` seconds while another run holds the machine's real node."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every) and phases.locked is None:
            say(f"still waiting for the machine's real node ({time.monotonic() - phases.began:.0f} s)")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


class Steps:
    """Prints each step's heading, evidence and time; a step's error becomes a :class:`StepFailed`
    naming the step."""

    def __init__(self, steps: tuple[Step, ...], out: TextIO) -> None:
        self.steps = steps
        self.out = out
        self.timings: list[tuple[Step, float]] = []

    def say(self, text: str) -> None:
        print(evidence(text), file=self.out, flush=True)

    @contextmanager
    def step(self, key: str) -> Iterator[None]:
        s = next(s for s in self.steps if s.key == key)
        number = self.steps.index(s) + 1
        print(heading(number, len(self.steps), s), file=self.out, flush=True)
        began = time.monotonic()
        try:
            yield
        except Exception as exc:
            self.timings.append((s, time.monotonic() - began))
            raise StepFailed(failure(number, len(self.steps), s, str(exc) or type(exc).__name__)) from exc
        self.timings.append((s, time.monotonic() - began))
        print(took(self.timings[-1][1]), file=self.out, flush=True)


@contextmanager
def interruptible() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP end the demo through its teardown (the real node and the control
    plane removed). SIGINT is set explicitly: a shell starts a background command with it ignored."""

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@interruptible()
def run(
    *,
    name: str | None,
    nodes: int,
    watches_file: Path,
    namespace: str,
    rows: int,
    archives: Callable[[], Iterable[Path]],
    out: TextIO = sys.stdout,
) -> int:
    """The whole demo; 0 when every step reached its goal, 1 otherwise (the failed step named)."""
    steps = Steps(plan(rows), out)
    say, step = steps.say, steps.step
    cluster = DevCluster(name, nodes=nodes)
    node: RealNode | None = None
    rc = 0
    log = tempfile.NamedTemporaryFile(prefix="helm-operator-demo-", suffix=".log", delete=False, mode="w")  # noqa: SIM115
    try:
        with step("cluster"):
            began = time.monotonic()
            cluster.start()
            say(f"control plane {cluster.name} up in {time.monotonic() - began:.1f} s")
            say("the real node: one per machine, another run's is waited for")
            node = RealNode(cluster.root, cluster.kubeconfig, cluster.tools)
            cluster.real_node = node
            phases = NodeStart(time.monotonic(), archives)
            with heartbeat(phases, say):
                node.start(phases.images, lock_wait=LOCK_WAIT)
            for line in phases.lines(time.monotonic()):
                say(line)
            nodes_out = cluster.kubectl("get", "nodes", "--no-headers").stdout.splitlines()
            say(f"nodes: {', '.join(line.split()[0] + ' ' + line.split()[1] for line in nodes_out)}")
        demo = Demo(cluster, namespace)
        with ExitStack() as running:
            with step("operator"):
                cluster.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
                cluster.kubectl(
                    "apply", "-f", str(REPO_ROOT / "config/02-crd-rollouts.yaml")
                )  # staged rollouts
                cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
                cluster.kubectl("create", "namespace", namespace)
                running.enter_context(operator_process(cluster, watches_file, namespace, log))
                say(f"helm-operator run --watches-file {watches_file} --namespace {namespace}")
                say(f"its log: {log.name}")
            r = Run(demo, rows, say)
            for key, action in (
                ("create", r.create),
                ("write", r.write),
                ("backup", r.take_backup),
                ("failover", r.failover),
                ("restore", r.restore),
            ):
                with step(key):
                    action()
    except StepFailed as exc:
        print(str(exc), file=sys.stderr, flush=True)
        print(f"operator log: {log.name}", file=sys.stderr, flush=True)
        rc = 1
    except KeyboardInterrupt:
        print("interrupted; tearing down", file=sys.stderr, flush=True)
        rc = 130
    finally:
        log.close()
        try:
            with step("teardown"):
                left = node.stop() if node is not None else []
                cluster.stop()
                if left:
                    raise StepFailed(f"the real node left traces on the machine: {left}")
                say("the real node left nothing: no process, mount, bridge, iptables chain, cgroup or sysctl")
                say(f"control plane {cluster.name} stopped, its folder removed")
        except StepFailed as exc:
            print(str(exc), file=sys.stderr, flush=True)
            rc = rc or 1
    for line in summary(steps.timings):
        print(line, file=out, flush=True)
    return rc
