"""No spec value ever becomes shell code in a Job of the shipped hooks.

Shell metacharacters go into every spec string (and backup name, location and action argument)
that reaches a Job of either sample — with ``validate`` bypassed, as a schedule run in the
harness does — and every container of every Job created is then checked and *run* here: a shell
only on a declared constant :class:`Script`, the process started as the kubelet would (its
``$(NAME)`` expansion included) under ``sh`` and ``bash``, with stub tools on ``PATH`` that record
their argv and environment. No injected command may run (its marker file stays absent) and each
value must arrive verbatim, as one argument or one variable. ``validate`` and the CRD schemas
refuse every payload, naming the field.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.hooks import InvalidSpec
from helm_operator.hooks.builtin import backup, jobs, shapes
from helm_operator.hooks.builtin.jobs import Script, ScriptError
from helm_operator.hooks.loader import load
from helm_operator.hooks.registry import Hooks
from helm_operator.hooks.testing import Harness, complete_jobs, expand, process

ROOT = Path(__file__).resolve().parents[2]
T0 = dt.datetime(2026, 11, 22, 10, 0, 0, tzinfo=dt.UTC)
SHELLS = [s for s in ("sh", "bash") if shutil.which(s)]
TOOLS = (
    "aws etcd etcdctl etcdutl pg_dump gzip gunzip psql gosu initdb pg_ctl createdb rm mkdir chown chmod grep"
    " awk wc md5sum sha256sum cut paste mv cp cat"
)
STUB = """#!/bin/sh
{ printf 'CALL\\0'; printf '%s\\0' "${0##*/}" "$@"; printf 'ENV\\0'; /usr/bin/env -0; printf 'END\\0'
} > "$STUB_LOG.$$"
"""

SAFE = Script('for f in "$@"; do echo "$f" "$GREETING" "${GREETING}" $?; done')


MARKER = "PWNED"  # relative: written in the process's working directory; a path would hold a "/"


def payloads(m: str = MARKER) -> list[str]:
    """Each tries to write the file ``m`` (``echo`` and ``>`` need nothing on PATH) or to have the
    kubelet expand a variable."""
    return [
        f"$(echo pwned>{m})",
        f"`echo pwned>{m}`",
        f"x;echo pwned>{m};#",
        f"x|echo pwned>{m}",
        f"x&&echo pwned>{m}",
        f"x\necho pwned>{m}\ny",
        f"x'\";echo pwned>{m};#",
        f'x"$(echo pwned>{m})"',
        f"x' || echo pwned>{m} || '",
        "$(PGUSER)$(AWS_CONFIG_FILE)$$(ETCDCTL_API)",
    ]


# --- the two samples, every string that reaches a Job set to a payload ---------------------------

OLD, SLOT = "old", "-202601010000"  # a recorded backup, pruned by the next one: its name is data too


def _etcd(payload: str, *, s3: bool, restore: str) -> dict[str, Any]:
    def bucket(tag: str) -> dict[str, Any]:
        return {
            "s3Bucket": f"{tag}bkt{payload}",
            "awsSecret": f"{tag}aws{payload}",
            "path": f"{tag}path{payload}",
            "endpoint": f"http://{tag}s3{payload}",
        }

    policy: dict[str, Any] = {"backupIntervalInSecond": 30, "maxBackups": 1}
    if s3:
        policy.update(storageType="S3", s3=bucket(""))
    old = f"s3://bkt/{OLD}{payload}{SLOT}.db" if s3 else f"pvc://etcd-backups/{OLD}{payload}{SLOT}.db"
    return {
        "apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": "EtcdCluster",
        "metadata": {"name": "etcd", "namespace": "prod", "uid": "9a9a9a9a-3333"},
        "spec": {
            "size": 2,
            "version": f"3.5.17{payload}",
            "repository": f"quay.io/etcd{payload}",
            "tls": {"static": {"operatorSecret": f"tls{payload}", "member": {"clientSecret": "c"}}},
            "pod": {"persistentVolumeClaimSpec": {"resources": {"requests": {"storage": "1Gi"}}}},
            "backup": policy,
            "restore": {"fromBackup": restore, "s3": bucket("r")},
        },
        "status": {"day2": {"backups": [_record(f"{OLD}{payload}{SLOT}", old)]}},
    }


def _pg(payload: str, restore: str) -> dict[str, Any]:
    return {
        "apiVersion": "postgresql.example.com/v1",
        "kind": "PostgreSQLCluster",
        "metadata": {"name": "db", "namespace": "prod", "uid": "0f00eac4-1111"},
        "spec": {
            "version": "17",
            "imageRepository": f"postgres{payload}",
            "auth": {"username": f"u{payload}", "database": f"d{payload}"},
            "backup": {"schedule": "0 2 * * *", "retention": "7d", "maxBackups": 1},
            "restore": {"fromBackup": restore},
        },
        "status": {
            "day2": {
                "backups": [_record(f"{OLD}{payload}{SLOT}", f"pvc://db-backups/{OLD}{payload}{SLOT}.sql.gz")]
            }
        },
    }


def _record(name: str, location: str) -> dict[str, Any]:
    return {"name": name, "phase": "Succeeded", "startTime": "2026-01-01T00:00:00Z", "location": location}


def _other(kind: str, api_version: str, payload: str, location: str) -> dict[str, Any]:
    """Another resource of the kind that recorded a backup named by ``payload`` (restore by name)."""
    meta = {"name": "old", "namespace": "prod"}
    day2 = {"backups": [_record(f"snap{payload}", location)]}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "status": {"day2": day2}}


def keep(created: list[dict[str, Any]]) -> Callable[[dict[str, Any]], None]:
    """An ``on_create`` that completes Jobs and keeps a copy of each (a later prune deletes some)."""

    def on_create(obj: dict[str, Any]) -> None:
        complete_jobs(obj)
        if obj["kind"] == "Job":
            created.append(copy.deepcopy(obj))

    return on_create


async def _drive(h: Harness, runs: list[dict[str, Any]]) -> None:
    for i, run in enumerate(runs):
        out = await h.run(**run, now=T0 + dt.timedelta(seconds=30 * i))
        if run.get("name") == "switchover":  # its argument names a Pod, looked up, never run
            assert out.result.permanent and "switchover: no member" in out.result.message, out.result
        else:
            assert out.ok, (run, out.result)


def etcd_jobs(payload: str) -> list[dict[str, Any]]:
    """Every Job the EtcdCluster hooks create: snapshots (S3 and volume), prunes, verifications,
    restores from s3://, pvc:// and by a backup's name."""
    hooks = load("hooks/etcdcluster.py", ROOT)
    api, snapshot = "etcd.database.coreos.com/v1beta2", {"kind": "schedule", "name": "snapshot"}
    install = {"kind": "before", "stage": "install"}
    found: list[dict[str, Any]] = []
    for s3, restore in [
        (True, f"s3://rbkt{payload}/key{payload}.db"),
        (False, f"pvc://claim{payload}/snap{payload}.db"),
        (True, f"snap{payload}"),
    ]:
        other = _other("EtcdCluster", api, payload, f"s3://obkt{payload}/o{payload}.db")
        h = Harness(hooks, _etcd(payload, s3=s3, restore=restore), objects=[other], on_create=keep(found))
        asyncio.run(_drive(h, [snapshot, snapshot, {"kind": "action", "name": "verify-backup"}, install]))
    return found


def pg_jobs(payload: str) -> list[dict[str, Any]]:
    """Every Job the PostgreSQLCluster hooks create: scheduled, on-demand and final backups,
    prunes, verifications, restores from pvc:// and by a backup's name; a switchover creates none."""
    hooks = load("hooks/postgresqlcluster.py", ROOT)
    found: list[dict[str, Any]] = []
    for restore in [f"pvc://claim{payload}/dump{payload}.sql.gz", f"snap{payload}"]:
        other = _other("PostgreSQLCluster", "postgresql.example.com/v1", payload, f"pvc://c/f{payload}")
        h = Harness(hooks, _pg(payload, restore), objects=[other], on_create=keep(found))
        runs = [
            {"kind": "schedule", "name": "backup"},
            {"kind": "action", "name": "backup-now", "argument": payload},
            {"kind": "action", "name": "switchover", "argument": payload},
            {"kind": "action", "name": "verify-backup"},
            {"kind": "before", "stage": "uninstall"},
            {"kind": "before", "stage": "install"},
        ]
        asyncio.run(_drive(h, runs))
    return found


# --- running a container here -------------------------------------------------------------------


@dataclass
class Call:
    tool: str
    argv: list[str]
    env: dict[str, str]


@dataclass
class Sandbox:
    """Stub tools on a fake PATH; each container's mounts are directories under ``root``."""

    root: Path
    log: Path = field(init=False)
    bin: Path = field(init=False)

    def __post_init__(self) -> None:
        self.bin, self.log = self.root / "bin", self.root / "calls"
        self.bin.mkdir(parents=True)
        for tool in TOOLS.split():
            (self.bin / tool).write_text(STUB)
            (self.bin / tool).chmod(0o755)

    def calls(self) -> list[Call]:
        """Every stub call (each wrote its own file: the stubs of a pipeline run at once)."""
        out = []
        for log in self.root.glob(f"{self.log.name}.*"):
            fields = log.read_bytes().decode().split("\0")
            assert fields[0] == "CALL" and fields[-2:] == ["END", ""], fields
            env_at = fields.index("ENV")
            argv, env = fields[1:env_at], dict(v.split("=", 1) for v in fields[env_at + 1 : -2])
            out.append(Call(argv[0], argv[1:], env))
        return out

    def pwned(self) -> list[Path]:
        return list(self.root.rglob(MARKER))

    def run(self, container: Mapping[str, Any], shell: str) -> subprocess.CompletedProcess[str]:
        """Start the container's process as the kubelet would (``process``), with its mounts
        under ``root`` and its shell, if it runs one, replaced by ``shell`` from this machine."""
        proc = process(container)
        mounts = [m["mountPath"] for m in container.get("volumeMounts") or ()]
        for m in mounts:
            (self.root / m.lstrip("/")).mkdir(parents=True, exist_ok=True)

        def here(s: str) -> str:
            for m in mounts:
                s = s.replace(f"{m}/", f"{self.root}{m}/")
            return s

        argv = [here(a) for a in proc.argv]
        if jobs.shell_text(proc.argv) is not None:
            argv[0] = shutil.which(shell) or shell
        else:
            argv[0] = str(self.bin / argv[0])
        env = {k: here(v) for k, v in proc.env.items()}
        env.update(PATH=str(self.bin), STUB_LOG=str(self.log))
        return subprocess.run(
            argv, env=env, cwd=self.root, capture_output=True, text=True, timeout=20, check=False
        )


def containers(job: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    pod = job["spec"]["template"]["spec"]
    yield from pod.get("initContainers") or ()
    yield from pod["containers"]


def _values(job: Mapping[str, Any]) -> list[str]:
    """Where a Job may carry a value as data without a process: images, volume sources."""
    pod = job["spec"]["template"]["spec"]
    out = [str(c["image"]) for c in containers(job)]
    for v in pod.get("volumes") or ():
        out += [str(x) for x in ((v.get("secret") or {}) | (v.get("persistentVolumeClaim") or {})).values()]
    return out


@pytest.mark.parametrize("sample", ["etcd", "pg"])
def test_payloads_in_every_spec_string_stay_data_in_every_job(sample: str, tmp_path: Path) -> None:
    for n, payload in enumerate(payloads()):
        found = etcd_jobs(payload) if sample == "etcd" else pg_jobs(payload)
        roles = sorted({j["metadata"]["labels"]["helm-operator.io/day2-role"] for j in found})
        assert roles == ["backup", "prune", "restore", "verify"], roles
        sandbox = Sandbox(tmp_path / f"run-{n}")
        for job in found:
            for c in containers(job):
                argv = process(c).argv
                script = jobs.shell_text(argv)
                for shell in SHELLS if script is not None else ["exec"]:
                    done = sandbox.run(c, shell)
                    what = f"{job['metadata']['name']}/{c['name']} under {shell} with {payload!r}"
                    assert not sandbox.pwned(), f"injected command ran: {what}"
                    assert done.returncode == 0, f"{what}: {done.stderr}"
                if script is not None:  # a shell only on a constant, the payload never in it
                    assert jobs.declared(script), script
                    assert payload not in script
        calls = sandbox.calls()
        received = [a for c in calls for a in c.argv] + [v for c in calls for v in c.env.values()]
        data = received + [v for job in found for v in _values(job)]
        for value in _reaching(sample, payload):
            assert any(value in d for d in data), f"{value!r} did not arrive verbatim"
        for value in _as_one_argument(sample, payload):
            assert any(value in a for c in calls for a in c.argv), f"{value!r} is not one argument"
        for name, value in _as_variables(sample, payload).items():
            assert any(c.env.get(name) == value for c in calls), f"{name} is not {value!r}"


def _reaching(sample: str, p: str) -> list[str]:
    """Every spec string that reaches a Job (as an argument, a variable, an image or a volume)."""
    if sample == "etcd":
        return [
            *(f"{f}{p}" for f in ("bkt", "path", "aws", "rbkt", "raws", "key")),
            f"http://s3{p}",
            f"http://rs3{p}",
            f"quay.io/etcd{p}:v3.5.17{p}",
            f"tls{p}",
            f"claim{p}",
            f"snap{p}.db",
            f"{OLD}{p}{SLOT}.db",
            f"o{p}.db",
        ]
    return [
        f"postgres{p}:17",
        f"u{p}",
        f"d{p}",
        f"claim{p}",
        f"dump{p}.sql.gz",
        f"{OLD}{p}{SLOT}.sql.gz",
        f"f{p}",
    ]


def _as_one_argument(sample: str, p: str) -> list[str]:
    if sample == "etcd":  # the URLs of uploads, fetches and prunes; files removed from the volume
        return [
            f"s3://bkt{p}/path{p}/",
            f"s3://rbkt{p}/key{p}.db",
            f"s3://bkt/{OLD}{p}{SLOT}.db",
            f"/{OLD}{p}{SLOT}.db",
        ]
    return [f"/backups/{OLD}{p}{SLOT}.sql.gz"]


def _as_variables(sample: str, p: str) -> dict[str, str]:
    if sample == "etcd":
        return {"AWS_ENDPOINT_URL": f"http://s3{p}"}  # and http://rs3… for the fetch (in _reaching)
    return {"PGUSER": f"u{p}", "PGDATABASE": f"d{p}", "SOURCE": f"dump{p}.sql.gz"}


# --- validate and the CRD schemas refuse every payload, naming the field --------------------------

ETCD_FIELDS = [
    "spec.backup.s3.s3Bucket",
    "spec.backup.s3.path",
    "spec.backup.s3.endpoint",
    "spec.backup.s3.awsSecret",
    "spec.restore.s3.s3Bucket",
    "spec.restore.s3.endpoint",
    "spec.restore.fromBackup",
    "spec.tls.static.operatorSecret",
    "spec.tls.static.member.peerSecret",
    "spec.repository",
]
PG_FIELDS = ["spec.auth.username", "spec.auth.database", "spec.restore.fromBackup", "spec.imageRepository"]
GOOD_ETCD = {
    "size": 1,
    "backup": {"storageType": "S3", "s3": {"s3Bucket": "bk-1", "awsSecret": "aws", "path": "etcd/a"}},
    "restore": {"fromBackup": "s3://bk-1/etcd/a/snap-1.db", "s3": {"s3Bucket": "bk-1", "awsSecret": "aws"}},
    "pod": {"persistentVolumeClaimSpec": {"resources": {"requests": {"storage": "1Gi"}}}},
    "tls": {"static": {"operatorSecret": "op", "member": {"peerSecret": "peer"}}},
    "repository": "quay.io/coreos/etcd",
}
GOOD_PG = {
    "auth": {"username": "app_user", "database": "app$1"},
    "restore": {"fromBackup": "pvc://db-backups/db-backup-202611220200.sql.gz"},
    "imageRepository": "docker.io/library/postgres",
}


def _with(spec: Mapping[str, Any], path: str, value: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(spec))
    *parents, leaf = path.removeprefix("spec.").split(".")
    node = out
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    return out


def _validate(module: str, kind: str, spec: Mapping[str, Any]) -> Any:
    resource = {"apiVersion": "x/v1", "kind": kind, "metadata": {"name": "r", "namespace": "n"}, "spec": spec}
    return asyncio.run(Harness(load(module, ROOT), resource).run("validate")).result


@pytest.mark.parametrize(
    ("module", "kind", "good", "fields"),
    [
        ("hooks/etcdcluster.py", "EtcdCluster", GOOD_ETCD, ETCD_FIELDS),
        ("hooks/postgresqlcluster.py", "PostgreSQLCluster", GOOD_PG, PG_FIELDS),
    ],
)
def test_validate_refuses_every_payload_naming_the_field(
    module: str, kind: str, good: Mapping[str, Any], fields: list[str]
) -> None:
    assert _validate(module, kind, good).ok
    for path in fields:
        for payload in payloads("/tmp/x"):
            result = _validate(module, kind, _with(good, path, f"a{payload}"))
            assert result.permanent and result.message.startswith("validate check_"), result
            assert f"{path}: " in result.message, (path, payload, result.message)


def _schema_at(schema: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    node: Mapping[str, Any] = schema
    for part in path.removeprefix("spec.").split("."):
        node = node["properties"][part]
        while "$ref" in node:
            node = schema["definitions"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _crd_at(crd: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    node = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for part in path.removeprefix("spec.").split("."):
        node = node["properties"][part]
    return node  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("chart", "crd", "fields"),
    [
        (
            "etcdcluster",
            "etcdclusters.etcd.database.coreos.com",
            {
                "spec.backup.s3.s3Bucket": shapes.BUCKET,
                "spec.backup.s3.path": shapes.KEY_PREFIX,
                "spec.backup.s3.endpoint": shapes.ENDPOINT,
                "spec.backup.s3.awsSecret": shapes.NAME,
                "spec.restore.s3.s3Bucket": shapes.BUCKET,
                "spec.restore.fromBackup": shapes.LOCATION,
                "spec.tls.static.operatorSecret": shapes.NAME,
                "spec.repository": shapes.IMAGE_REPOSITORY,
            },
        ),
        (
            "postgresqlcluster",
            "postgresqlclusters.postgresql.example.com",
            {
                "spec.restore.fromBackup": shapes.VOLUME_LOCATION,
                "spec.imageRepository": shapes.IMAGE_REPOSITORY,
            },
        ),
    ],
)
def test_chart_schemas_and_crds_carry_the_hooks_shapes(
    chart: str, crd: str, fields: Mapping[str, shapes.Shape]
) -> None:
    schema = json.loads((ROOT / "charts" / chart / "values.schema.json").read_text())
    generated = yaml.safe_load((ROOT / "crds" / f"{crd}.yaml").read_text())
    for path, shape in fields.items():
        for node in (_schema_at(schema, path), _crd_at(generated, path)):
            assert (node.get("pattern"), node.get("maxLength")) == (shape.pattern, shape.max_length), path


# --- the Job builders ---------------------------------------------------------------------------


def test_a_script_is_a_module_constant_with_quoted_expansions_only() -> None:
    with pytest.raises(ScriptError, match="top level, not in test_a_script_is"):
        Script('echo "$X"')
    for text, why in [
        ("rm -f $FILES", 'unquoted expansion $FILES (write "$FILES")'),
        ("aws s3 rm s3://$1", "unquoted expansion $1"),
        ('echo "$(id)"', "command substitution"),
        ("echo `id`", "command substitution"),
        ("echo ${X}", 'unquoted expansion ${X} (write "${X}")'),
        ('echo "${X:-$Y}"', "must name one variable"),
        ('echo "a', 'unbalanced " quote'),
    ]:
        assert any(why in p for p in jobs.lint(text)), (text, jobs.lint(text))
    assert jobs.lint('echo \'$(not run)\' "$A" "${B#x}" ${#C} $? "$@" # don\'t $D') == []
    assert jobs.declared(SAFE.text) and not jobs.declared(SAFE.text + " ")


def test_builders_refuse_shell_text_and_escape_values_for_the_kubelet() -> None:
    bucket = "bkt$(id>/tmp/x)"
    with pytest.raises(ScriptError, match="runs a text as code; use shell"):
        jobs.command("prune", "aws", ["/bin/sh", "-ec", f"aws s3 rm s3://{bucket}"])
    with pytest.raises(ScriptError, match="runs a text as code"):
        jobs.command("prune", "busybox", ["busybox", "sh", "-o", "pipefail", "-xc", "x"])
    with pytest.raises(ScriptError, match="give a Script"):
        jobs.shell("prune", "aws", f"aws s3 rm s3://{bucket}")  # type: ignore[arg-type]
    with pytest.raises(ScriptError, match="not a valid environment variable name"):
        jobs.command("x", "i", ["true"], env={"A B": "1"})
    assert jobs.shell_text(["bash", "--", "script.sh"]) is None
    assert jobs.shell_text(["sh", "script.sh", "-c", "x"]) is None
    c = jobs.shell("greet", "busybox", SAFE, args=[bucket, "$$"], env={"GREETING": "$(HOME) $x"})
    manifest = c.manifest()
    assert manifest["command"][:2] == ["/bin/sh", "-ec"] and manifest["command"][4] == "bkt$$(id>/tmp/x)"
    proc = process(manifest)
    assert proc.argv == ["/bin/sh", "-ec", SAFE.text, "greet", bucket, "$$"]
    assert proc.env == {"GREETING": "$(HOME) $x"}
    assert expand("$(A)-$$(A)-$(B)-$(-$", {"A": "1"}) == "1-$(A)-$(B)-$(-$"


def test_the_builtins_refuse_a_job_that_formats_a_value_into_a_script() -> None:
    """The old prune Job of the EtcdCluster sample, built by hand, is refused before it runs."""
    hooks = Hooks()
    formatted = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "etcd-prune-1", "namespace": "prod"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "prune", "image": "aws", "command": ["/bin/sh", "-ec", "aws s3 rm s3://b/x"]}
                    ]
                }
            }
        },
    }

    @hooks.action("prune")
    async def prune(ctx: Any) -> None:
        await backup.run_job(ctx, formatted)

    @hooks.action("raw")
    async def raw(ctx: Any) -> None:
        backup.job(ctx, "j", "prune", [], pod={"containers": [{"name": "x", "command": ["sh", "-c", "x"]}]})

    resource = {"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "etcd", "namespace": "prod"}}
    h = Harness(hooks, resource)
    out = asyncio.run(h.run("action", name="prune"))
    assert not out.ok and "its shell script is not a declared Script" in out.result.message
    assert out.created == []
    out = asyncio.run(h.run("action", name="raw"))
    assert "give containers as arguments, not in pod" in out.result.message


def test_invalid_spec_names_field_and_shape() -> None:
    with pytest.raises(InvalidSpec, match=r"spec.backup.s3.s3Bucket: 'bkt\$\(id\)' is not an S3 bucket name"):
        shapes.BUCKET.check("bkt$(id)", "spec.backup.s3.s3Bucket")
    with pytest.raises(InvalidSpec, match="is not an S3 bucket name"):
        shapes.BUCKET.check("bkt\n", "spec.backup.s3.s3Bucket")  # re's $ also matches before a final \n
    assert shapes.ENDPOINT.check("https://[::1]:9000/s3", "e") and shapes.ENDPOINT.check(
        "http://minio:9000", "e"
    )


def test_a_prune_job_is_named_validly_whatever_the_records_are_called() -> None:
    resource = _pg("", "pvc://c/f")
    resource["status"]["day2"]["backups"] = [_record("old$(id)/..", "pvc://db-backups/x")]
    h = Harness(load("hooks/postgresqlcluster.py", ROOT), resource)
    out = asyncio.run(h.run("schedule", name="backup", now=T0))
    assert out.ok, out.result
    prune = [n for k, n in out.created if k == "Job" and n.startswith("db-prune-")]
    assert len(prune) == 1 and len(prune[0]) == len("db-prune-") + 12, prune


def test_a_hand_built_job_with_a_script_made_of_values_is_refused_by_ctx_kube() -> None:
    """Not only the builtins: whatever a hook creates through ctx.kube (the operator's client and
    the harness alike) is checked, Jobs, CronJobs and Pods."""
    import asyncio

    from helm_operator.hooks import Hooks
    from helm_operator.hooks.builtin.jobs import ScriptError
    from helm_operator.hooks.testing import Harness

    hooks = Hooks()
    bucket = "bkt$(id>/tmp/x)"
    script = f"aws s3 rm s3://{bucket}/old"  # the class of bug: a value formatted into shell text
    container = {"name": "prune", "image": "aws", "command": ["sh", "-c", script]}
    made = {
        "Job": {"spec": {"template": {"spec": {"containers": [container]}}}},
        "CronJob": {"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [container]}}}}}},
        "Pod": {"spec": {"containers": [container]}},
    }

    @hooks.action("prune")
    async def prune(ctx: Any) -> None:
        api = "v1" if ctx.argument == "Pod" else "batch/v1"
        meta = {"name": "by-hand", "namespace": ctx.namespace}
        await ctx.kube.create(
            {"apiVersion": api, "kind": ctx.argument, "metadata": meta, **made[ctx.argument]}
        )

    resource = {"apiVersion": "x.example.com/v1", "kind": "X", "metadata": {"name": "x", "namespace": "n"}}
    for kind in made:
        out = asyncio.run(Harness(hooks, resource).run("action", name="prune", argument=kind))
        assert not out.ok and "is not a declared Script" in out.result.message, (kind, out.result)
    with pytest.raises(ScriptError):  # the operator's own client checks before it sends anything
        from helm_operator.hooks.kubeclient import AsyncKube

        asyncio.run(AsyncKube(None).create({"kind": "Job", "metadata": {"name": "j"}, **made["Job"]}))  # type: ignore[arg-type]


# --- a backup that fails is a failed Job --------------------------------------------------------


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("dump_exit", [0, 3])
def test_a_failing_pg_dump_fails_the_backup_job(shell: str, dump_exit: int, tmp_path: Path) -> None:
    """``pg_dump … | gzip`` under ``sh -e`` exits with gzip's status: a dump that failed half way
    would be recorded as a good backup. The dump Job's script must exit non-zero and leave no
    ``.sql.gz`` when pg_dump fails, and leave the compressed dump when it succeeds."""
    found = [j for j in pg_jobs("x") if j["metadata"]["labels"]["helm-operator.io/day2-role"] == "backup"]
    dump = next(c for j in found for c in containers(j) if c["name"] == "backup")
    sandbox = Sandbox(tmp_path)
    (sandbox.bin / "pg_dump").write_text(
        '#!/bin/sh\nfor a in "$@"; do case "$a" in --file=*) out="${a#--file=}";; esac; done\n'
        'if [ -n "$out" ]; then echo "partial" > "$out"; else echo "partial"; fi\n'
        f"exit {dump_exit}\n"
    )
    for tool in ("gzip", "rm"):
        (sandbox.bin / tool).unlink()
        (sandbox.bin / tool).symlink_to(shutil.which(tool) or tool)
    done = sandbox.run(dump, shell)
    written = list((tmp_path / "backups").glob("*.sql.gz"))
    if dump_exit:
        assert done.returncode != 0, f"a failed pg_dump left the backup Job succeeding: {done.stderr}"
        assert not written, written
    else:
        assert done.returncode == 0, done.stderr
        assert [p.name for p in written] == [f"{dump['env'][-1]['value']}.sql.gz"], written
