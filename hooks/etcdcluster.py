"""Day-2 hooks of EtcdCluster: periodic snapshots with count-based retention, and restore of a new
cluster from a snapshot — on the same Job machinery as PostgreSQLCluster's backups.

Snapshots are ``etcdctl snapshot save`` Jobs every ``backup.backupIntervalInSecond`` (0 or absent:
none) and on request (``helm-operator.io/action: backup-now``), kept ``backup.maxBackups`` deep (0
or absent: all). ``backup.storageType: S3`` uploads them
to ``s3://<s3Bucket>/<path>/`` with the credentials of the Secret ``s3.awsSecret`` (keys
``credentials`` and ``config``, as the AWS CLI reads them); otherwise they go to the
PersistentVolumeClaim ``<cluster>-backups``. ``restore.fromBackup`` (a snapshot another cluster
recorded, or its location) fills every member's data volume before the StatefulSet starts, so it
needs ``pod.persistentVolumeClaimSpec``. With ``tls.static.operatorSecret`` etcdctl uses that
client certificate (keys ``etcd-client.crt``, ``etcd-client.key``, ``etcd-client-ca.crt``).
Every Job runs where the members run (the chart's ``nodeSelector``, ``tolerations`` and node
affinity, top-level or under ``pod``), since it reads their volumes or reaches them. The files of
pruned snapshots are removed with ``rm`` from ``backup.toolsImage`` (busybox by default: etcd's
own images have no shell tools), an image a cluster without registry access can name a mirror of.

``backup.verifySchedule`` (5-field cron) and the action ``helm-operator.io/action: verify-backup``
verify the newest snapshot: a throw-away one-member etcd (one Job, the members' image and
placement) restores it with ``etcdutl snapshot restore`` (which checks its hash), serves it on
localhost, and must answer ``etcdctl get``; ``status.day2.lastVerifiedBackup`` records it.

Every spec value reaches a Job as one argv element or an environment variable (``jobs.command``,
``jobs.shell`` with a constant ``Script``), never as shell text; ``validate`` checks their shapes.

``size`` changes one member per upgrade (a learner added before its Pod starts and promoted once
caught up; a member removed before its Pod goes), and a new ``version`` restarts the members one
at a time, the leader last, each healthy before the next; see "membership and version changes"
below.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from helm_operator.hooks import (
    Claim,
    Context,
    ExecFailed,
    Hooks,
    InvalidSpec,
    PermanentError,
    Retention,
    Script,
    TemporaryError,
    backup,
    bounded,
    jobs,
    rolling,
    shapes,
    verify,
)

AWS_CLI = "amazon/aws-cli:2.22.35"
BUSYBOX = "busybox:1.37"
TLS_DIR = "/etc/etcdtls/operator"

# Removes the objects given as arguments (the URLs are "$@": data, never parsed as shell).
PRUNE_S3 = Script('for url in "$@"; do aws s3 rm "$url"; done')

hooks = Hooks()


def _policy(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    return spec.get("backup") or {}


def retention(spec: Mapping[str, Any]) -> Retention:
    count = _policy(spec).get("maxBackups")
    if count is None or count == 0:
        return Retention()
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InvalidSpec("spec.backup.maxBackups", f"expected a whole number (0: keep all), got {count!r}")
    return Retention(max_count=count)


def _s3(section: Mapping[str, Any], path: str = "spec.backup") -> Mapping[str, Any] | None:
    """The S3 settings of a section (``backup`` or ``restore``) if it stores in S3."""
    kind = str(section.get("storageType") or "")
    if kind and kind != "S3":
        raise InvalidSpec(
            f"{path}.storageType", f"{kind} is not supported: use S3, or leave it out for a volume"
        )
    if kind != "S3":
        return None
    s3 = section.get("s3") or {}
    if not s3.get("s3Bucket") or not s3.get("awsSecret"):
        raise InvalidSpec(f"{path}.s3", "storageType S3 needs s3.s3Bucket and s3.awsSecret")
    return s3


S3_SHAPES = {
    "s3Bucket": shapes.BUCKET,
    "awsSecret": shapes.NAME,
    "path": shapes.KEY_PREFIX,
    "endpoint": shapes.ENDPOINT,
}


def check_shapes(spec: Mapping[str, Any]) -> None:
    """Every spec string that reaches a Job has its shape (``InvalidSpec`` names the field)."""
    for section in ("backup", "restore"):
        s3 = (spec.get(section) or {}).get("s3") or {}
        for key, shape in S3_SHAPES.items():
            if s3.get(key) not in (None, ""):
                shape.check(s3[key], f"spec.{section}.s3.{key}")
    source = (spec.get("restore") or {}).get("fromBackup")
    if source is not None:
        shapes.LOCATION.check(source, "spec.restore.fromBackup")
    static = (spec.get("tls") or {}).get("static") or {}
    secrets = {"operatorSecret": static.get("operatorSecret"), **(static.get("member") or {})}
    for key, secret in secrets.items():
        if secret not in (None, ""):
            shapes.NAME.check(secret, f"spec.tls.static.{'' if key == 'operatorSecret' else 'member.'}{key}")
    if spec.get("repository") is not None:
        shapes.IMAGE_REPOSITORY.check(spec["repository"], "spec.repository")
    tools = (spec.get("backup") or {}).get("toolsImage")
    if tools is not None:
        shapes.IMAGE_REPOSITORY.check(tools, "spec.backup.toolsImage")


def placement(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Where the chart places the members (``templates/_helpers.tpl``): the top-level
    ``nodeSelector``/``affinity`` merged over ``pod``'s, the tolerations of both; a Job takes the
    node-side part of it (no pod affinity: that is about the members themselves)."""
    pod = spec.get("pod") or {}
    selector = {**(pod.get("nodeSelector") or {}), **(spec.get("nodeSelector") or {})}
    tolerations: list[dict[str, Any]] = []
    for t in [*(pod.get("tolerations") or ()), *(spec.get("tolerations") or ())]:
        if dict(t) not in tolerations:
            tolerations.append(dict(t))
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or (pod.get("affinity") or {}).get(
        "nodeAffinity"
    )
    out: dict[str, Any] = {}
    if selector:
        out["nodeSelector"] = selector
    if tolerations:
        out["tolerations"] = tolerations
    if node_affinity:
        out["affinity"] = {"nodeAffinity": dict(node_affinity)}
    return out


def _job(
    ctx: Context, name: str, role: str, containers: Sequence[jobs.Container], **kw: Any
) -> dict[str, Any]:
    """``backup.job`` placed where the members run."""
    return backup.job(ctx, name, role, containers, pod=placement(ctx.values or ctx.spec), **kw)


def statefulset(ctx: Context) -> str:
    return ctx.release_name[:52].rstrip("-")


def _image(ctx: Context) -> str:
    values = ctx.values or dict(ctx.spec)
    return f"{values.get('repository', 'quay.io/coreos/etcd')}:v{values.get('version', '3.5.17')}"


def _version(ctx: Context) -> tuple[int, int]:
    """The members' etcd version (major, minor); the chart's default when unset or unparsed."""
    parts = str((ctx.values or dict(ctx.spec)).get("version") or "3.5.17").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return 3, 5


def _api_env(ctx: Context) -> dict[str, str]:
    """``ETCDCTL_API=3`` where etcdctl still defaults to the v2 API (before 3.4); later ones speak
    v3 anyway and 3.6 logs the variable as unrecognized on every run."""
    return {"ETCDCTL_API": "3"} if _version(ctx) < (3, 4) else {}


def _tls(ctx: Context) -> tuple[list[str], list[dict[str, Any]], dict[str, str]]:
    """etcdctl flags, volumes and mounts for the operator's client certificate, if configured."""
    secret = ((ctx.spec.get("tls") or {}).get("static") or {}).get("operatorSecret")
    if not secret:
        return [], [], {}
    flags = [
        f"--cacert={TLS_DIR}/etcd-client-ca.crt",
        f"--cert={TLS_DIR}/etcd-client.crt",
        f"--key={TLS_DIR}/etcd-client.key",
    ]
    return flags, [{"name": "tls", "secret": {"secretName": str(secret)}}], {"tls": TLS_DIR}


def _scheme(ctx: Context, which: str) -> str:
    member = ((ctx.spec.get("tls") or {}).get("static") or {}).get("member") or {}
    return "https" if member.get(f"{which}Secret") else "http"


def _aws_env(s3: Mapping[str, Any]) -> dict[str, str]:
    """The AWS CLI's settings: credentials from the Secret, the endpoint (read by the CLI itself
    from ``AWS_ENDPOINT_URL``, 2.13 and later)."""
    env = {"AWS_SHARED_CREDENTIALS_FILE": "/etc/aws/credentials", "AWS_CONFIG_FILE": "/etc/aws/config"}
    if s3.get("endpoint"):
        env["AWS_ENDPOINT_URL"] = str(s3["endpoint"])
    return env


def _aws_secret(s3: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": "aws", "secret": {"secretName": str(s3["awsSecret"])}}


def _s3_url(s3: Mapping[str, Any], file: str) -> str:
    prefix = str(s3.get("path") or "").strip("/")
    return f"s3://{s3['s3Bucket']}/{prefix + '/' if prefix else ''}{file}"


def claim(ctx: Context) -> str:
    return bounded(ctx.name, "backups")


def snapshot_job(ctx: Context, name: str) -> tuple[dict[str, Any], str]:
    """The Job that saves one snapshot, and where it ends up."""
    flags, tls_volumes, tls_mounts = _tls(ctx)
    endpoint = f"--endpoints={_scheme(ctx, 'client')}://{statefulset(ctx)}-client:2379"
    save = jobs.command(
        "snapshot",
        _image(ctx),
        ["etcdctl", endpoint, *flags, "snapshot", "save", f"/snapshots/{name}.db"],
        env=_api_env(ctx),
        mounts={"snapshots": "/snapshots", **tls_mounts},
    )
    s3 = _s3(_policy(ctx.spec))
    if s3 is None:
        volumes = [{"name": "snapshots", "persistentVolumeClaim": {"claimName": claim(ctx)}}, *tls_volumes]
        return _job(ctx, name, "backup", [save], volumes=volumes), f"pvc://{claim(ctx)}/{name}.db"
    url = _s3_url(s3, f"{name}.db")
    upload = jobs.command(
        "upload",
        AWS_CLI,
        ["aws", "s3", "cp", f"/snapshots/{name}.db", url],
        env=_aws_env(s3),
        mounts={"snapshots": "/snapshots", "aws": "/etc/aws"},
    )
    volumes = [{"name": "snapshots", "emptyDir": {}}, _aws_secret(s3), *tls_volumes]
    return _job(ctx, name, "backup", [upload], init=[save], volumes=volumes), url


def cleanup_job(ctx: Context, gone: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Remove the snapshot files of pruned backups (on the volume or in the bucket)."""
    on_volume = backup.remove_files(ctx, gone, str(_policy(ctx.spec).get("toolsImage") or BUSYBOX))
    if on_volume is not None:
        on_volume["spec"]["template"]["spec"].update(placement(ctx.values or ctx.spec))
    urls = [str(r["location"]) for r in gone if str(r.get("location") or "").startswith("s3://")]
    if on_volume is not None or not urls:
        return on_volume
    s3 = _s3(_policy(ctx.spec)) or {}
    rm = jobs.shell("prune", AWS_CLI, PRUNE_S3, args=urls, env=_aws_env(s3), mounts={"aws": "/etc/aws"})
    job = _job(ctx, backup.prune_name(ctx, gone), "prune", [rm], volumes=[_aws_secret(s3)])
    job["spec"]["ttlSecondsAfterFinished"] = 600
    return job


@hooks.validate()
async def check_policy(ctx: Context) -> None:
    retention(ctx.spec)
    _s3(_policy(ctx.spec))
    check_shapes(ctx.spec)
    if (ctx.spec.get("restore") or {}).get("fromBackup") and not (ctx.spec.get("pod") or {}).get(
        "persistentVolumeClaimSpec"
    ):
        raise InvalidSpec(
            "spec.restore.fromBackup",
            "a restore fills the members' volumes: set spec.pod.persistentVolumeClaimSpec",
        )


@hooks.schedule("snapshot", every="spec.backup.backupIntervalInSecond")
async def periodic_snapshot(ctx: Context) -> None:
    await snapshot(ctx)


@hooks.action("backup-now", uses="spec.backup")
async def backup_now(ctx: Context) -> None:
    """``helm-operator.io/action: backup-now``: one snapshot now, pruned by the same retention."""
    await snapshot(ctx)


async def snapshot(ctx: Context) -> None:
    """One snapshot named ``ctx.run`` (the schedule's or the action's run), then retention."""
    job, location = snapshot_job(ctx, ctx.run)
    size = str(_policy(ctx.spec).get("storage") or "1Gi")
    await backup.take_and_prune(
        ctx,
        ctx.run,
        job,
        location,
        claim=Claim(claim(ctx), size) if location.startswith("pvc://") else None,
        keep=retention(ctx.spec),
        cleanup=lambda gone: cleanup_job(ctx, gone),
    )


# --- restore ------------------------------------------------------------------------------------


def _source(ctx: Context, location: str) -> tuple[list[jobs.Container], list[dict[str, Any]]]:
    """Where a restore reads the snapshot at ``location``: the backup volume mounted read-only at
    /snapshots, or (``s3://``) an emptyDir there the init container returned fills first."""
    if not location.startswith("s3://"):
        claim_name = location.removeprefix("pvc://").split("/", 1)[0]
        return [], [
            {"name": "snapshots", "persistentVolumeClaim": {"claimName": claim_name, "readOnly": True}}
        ]
    s3 = _s3(
        {
            "storageType": "S3",
            "s3": (ctx.spec.get("restore") or {}).get("s3") or _policy(ctx.spec).get("s3") or {},
        },
        "spec.restore",
    )
    assert s3 is not None
    fetch = jobs.command(
        "fetch",
        AWS_CLI,
        ["aws", "s3", "cp", location, f"/snapshots/{location.rsplit('/', 1)[-1]}"],
        env=_aws_env(s3),
        mounts={"snapshots": "/snapshots", "aws": "/etc/aws"},
    )
    return [fetch], [{"name": "snapshots", "emptyDir": {}}, _aws_secret(s3)]


def _tool(ctx: Context) -> str:
    return "etcdctl" if _version(ctx) < (3, 5) else "etcdutl"  # etcdutl from 3.5 on


def restore_job(ctx: Context, name: str, location: str) -> dict[str, Any]:
    """One init container per member restores the snapshot into that member's data volume."""
    sts, ns = statefulset(ctx), ctx.namespace
    size = int((ctx.values or dict(ctx.spec)).get("size") or 1)
    peer = _scheme(ctx, "peer")
    urls = [f"{peer}://{sts}-{i}.{sts}.{ns}.svc:2380" for i in range(size)]
    cluster = ",".join(f"{sts}-{i}={u}" for i, u in enumerate(urls))
    file = location.rsplit("/", 1)[-1]
    tool = _tool(ctx)
    init, volumes = _source(ctx, location)
    for i, url in enumerate(urls):
        volumes.append({"name": f"data-{i}", "persistentVolumeClaim": {"claimName": f"data-{sts}-{i}"}})
        init.append(
            jobs.command(
                f"restore-{i}",
                _image(ctx),
                [
                    tool,
                    "snapshot",
                    "restore",
                    f"/snapshots/{file}",
                    f"--name={sts}-{i}",
                    f"--initial-cluster={cluster}",
                    f"--initial-cluster-token={ctx.release_name}",
                    f"--initial-advertise-peer-urls={url}",
                    f"--data-dir=/data-{i}/default.etcd",
                ],
                env=_api_env(ctx),
                mounts={"snapshots": "/snapshots", f"data-{i}": f"/data-{i}"},
            )
        )
    done = jobs.command("done", _image(ctx), [tool, "version"])
    return _job(ctx, name, "restore", [done], init=init, volumes=volumes)


@hooks.before("install", timeout=120)
async def restore_from_backup(ctx: Context) -> None:
    """Before the StatefulSet exists: restore every member's data volume from the snapshot."""
    await backup.restore_before_install(
        ctx,
        lambda name, at: restore_job(ctx, name, at),
        claims=lambda: data_claims(ctx),
        schemes=("pvc", "s3"),
    )


def data_claims(ctx: Context) -> list[Claim]:
    """The members' data volumes, as the StatefulSet's claim template will make them."""
    template = (ctx.spec.get("pod") or {}).get("persistentVolumeClaimSpec")
    if not template:
        raise PermanentError("spec.restore.fromBackup: a restore needs spec.pod.persistentVolumeClaimSpec")
    size = str(((template.get("resources") or {}).get("requests") or {}).get("storage") or "1Gi")
    modes = tuple(template.get("accessModes") or ("ReadWriteOnce",))
    count = int((ctx.values or dict(ctx.spec)).get("size") or 1)
    return [
        Claim(f"data-{statefulset(ctx)}-{i}", size, template.get("storageClassName"), "data", modes)
        for i in range(count)
    ]


# --- verification -------------------------------------------------------------------------------

LOCAL = "http://127.0.0.1"  # the throw-away member listens on the Pod's loopback only
SCRATCH_DATA = "/scratch/verify.etcd"


def verify_job(ctx: Context, name: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """The throw-away one-member etcd: ``etcdutl snapshot restore`` of the snapshot ``record``
    names into the scratch volume (a truncated or altered file fails its hash check), the member
    serving it (a sidecar, ready once ``endpoint health`` answers), then ``etcdctl get``."""
    location = str(record["location"])
    init, volumes = _source(ctx, location)
    peer = f"--initial-cluster=verify={LOCAL}:2380"
    restore = jobs.command(
        "restore",
        _image(ctx),
        [
            _tool(ctx),
            "snapshot",
            "restore",
            f"/snapshots/{location.rsplit('/', 1)[-1]}",
            "--name=verify",
            peer,
            f"--initial-advertise-peer-urls={LOCAL}:2380",
            f"--data-dir={SCRATCH_DATA}",
        ],
        env=_api_env(ctx),
        mounts={"snapshots": "/snapshots", verify.SCRATCH: "/scratch"},
    )
    member = jobs.command(
        "etcd",
        _image(ctx),
        [
            "etcd",
            "--name=verify",
            f"--data-dir={SCRATCH_DATA}",
            f"--listen-client-urls={LOCAL}:2379",
            f"--advertise-client-urls={LOCAL}:2379",
            f"--listen-peer-urls={LOCAL}:2380",
            f"--initial-advertise-peer-urls={LOCAL}:2380",
            peer,
        ],
        mounts={verify.SCRATCH: "/scratch"},
    )
    endpoint = f"--endpoints={LOCAL}:2379"
    serve = verify.Sidecar(member, ("etcdctl", endpoint, "endpoint", "health"))
    get = jobs.command(
        "check",
        _image(ctx),
        ["etcdctl", endpoint, "get", "", "--prefix", "--keys-only", "--limit=1"],
        env=_api_env(ctx),
    )
    return verify.instance(
        ctx,
        name,
        [get],
        restore=[*init, restore],
        serve=[serve],
        volumes=volumes,
        pod=placement(ctx.values or ctx.spec),
        logs_on_error=True,
    )


@hooks.schedule("verify", cron="spec.backup.verifySchedule")
async def scheduled_verification(ctx: Context) -> None:
    """Verify the newest snapshot on ``backup.verifySchedule`` (none yet: an Event, no failure)."""
    await verify.verify_latest(ctx, lambda name, record: verify_job(ctx, name, record), require=False)


@hooks.action("verify-backup")
async def verify_backup(ctx: Context) -> None:
    """``helm-operator.io/action: verify-backup``: verify the newest snapshot now."""
    await verify.verify_latest(ctx, lambda name, record: verify_job(ctx, name, record))


# -- membership and version changes ----------------------------------------------------------------
# etcd grows and shrinks one member at a time: a member is added to the cluster (as a learner,
# which does not count towards quorum) before its Pod starts with ETCD_INITIAL_CLUSTER_STATE
# existing, and promoted once it has caught up; a member leaves the cluster (the leader hands over
# first) before its Pod goes. So the value translator renders at most one member more or fewer
# than the StatefulSet has: each step is one Helm upgrade, and the next reconcile takes the next.
# A version change goes member by member (the chart's StatefulSet is OnDelete): rolling.roll,
# each member healthy before the next, the leader last, handing leadership to an upgraded member
# before it goes (a planned transfer: no election timeout for clients to wait out). A member
# without a data volume (no pod.persistentVolumeClaimSpec) comes back empty: it cannot restart as
# itself (its peers would send it a log it no longer has), so it is replaced, as the etcd operator
# did: removed from the cluster, added again as a learner, and promoted once it has caught up.

STEP_TIMEOUT = 300.0  # seconds a learner may take to start and catch up, or a member to restart


def next_size(live: int | None, wanted: int) -> int:
    """The size the next upgrade renders: one member more or fewer than the StatefulSet has, on
    the way to ``wanted``; a new cluster (no StatefulSet yet) bootstraps at ``wanted``."""
    if live is None or live == wanted:
        return wanted
    return live + 1 if wanted > live else live - 1


def version_change(running: str, wanted: str) -> str | None:
    """Why etcd cannot go from ``running`` to ``wanted`` in place (None: it can): a downgrade, a
    skipped minor version, or another major version."""
    try:
        old = tuple(int(p) for p in running.split("-")[0].split(".")[:3])
        new = tuple(int(p) for p in wanted.split("-")[0].split(".")[:3])
    except ValueError:
        return None  # the schema's pattern checks the spec; an image the chart did not render is not ours
    if new < old:
        return f"a downgrade from {running} to {wanted}: etcd does not downgrade in place"
    if new[0] != old[0]:
        return f"{running} to {wanted} changes the major version"
    if new[1] > old[1] + 1:
        return (
            f"{running} to {wanted} skips a minor version: etcd upgrades one minor at a time "
            f"(first {old[0]}.{old[1] + 1})"
        )
    return None


def _running_version(ctx: Context) -> str | None:
    """The etcd version the deployed release runs (its StatefulSet's image tag)."""
    if ctx.release is None:
        return None
    for sts in ctx.release.find("StatefulSet"):
        for container in sts.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            if container.get("name") == "etcd":
                return str(container.get("image", "")).rpartition(":v")[2] or None
    return None


def stale_claims(claims: Sequence[str], name: str, replicas: int) -> list[str]:
    """The data volumes of members the StatefulSet no longer has (``data-<name>-<ordinal>`` at or
    past ``replicas``): a member added later at that ordinal must start with an empty directory,
    not as the removed member it would claim to be."""
    prefix = f"data-{name}-"
    return [
        c
        for c in claims
        if c.startswith(prefix) and c[len(prefix) :].isdigit() and int(c[len(prefix) :]) >= replicas
    ]


BOOTSTRAP_ENV = frozenset({"ETCD_INITIAL_CLUSTER", "ETCD_INITIAL_CLUSTER_STATE"})


def needs_restart(pod: Mapping[str, Any], template: Mapping[str, Any]) -> bool:
    """Whether a member must restart to run the template: not when only the bootstrap settings
    differ (a member with data ignores them; they change with every resize)."""

    def essence(spec: Mapping[str, Any]) -> list[Any]:
        out = []
        for c in spec.get("containers") or []:
            env = sorted(
                json.dumps(e, sort_keys=True)
                for e in c.get("env") or []
                if e.get("name") not in BOOTSTRAP_ENV
            )
            out.append(
                [c.get("name"), c.get("image"), c.get("command"), c.get("args"), c.get("resources"), env]
            )
        return out

    return essence(pod.get("spec") or {}) != essence(template.get("spec") or {})


def _peer_url(ctx: Context, ordinal: int) -> str:
    name = statefulset(ctx)
    return f"{_scheme(ctx, 'peer')}://{name}-{ordinal}.{name}.{ctx.namespace}.svc:2380"


def _member_flags(ctx: Context, pod: str) -> list[str]:
    """etcdctl run in a member's container reaches that member: the loopback client URL, or with
    client TLS its DNS name and the member's own certificate."""
    if _scheme(ctx, "client") == "http":
        return ["--endpoints=http://127.0.0.1:2379"]
    tls = "/etc/etcdtls/member/server-tls"
    return [
        f"--endpoints=https://{pod}.{statefulset(ctx)}.{ctx.namespace}.svc:2379",
        f"--cacert={tls}/server-ca.crt",
        f"--cert={tls}/server.crt",
        f"--key={tls}/server.key",
    ]


async def etcdctl(ctx: Context, pod: str, *args: str, timeout: float = 20.0) -> Any:
    """etcdctl in a member's container (the image has it; no Job to schedule), its JSON output."""
    argv = ["etcdctl", *_member_flags(ctx, pod), *args, "-w", "json"]
    out = await ctx.kube.exec(pod, str(ctx.namespace), argv, container="etcd", timeout=timeout)
    return json.loads(out) if out.strip() else None


def _hex(member_id: int) -> str:
    return format(int(member_id), "x")


async def _members(ctx: Context, via: str) -> list[dict[str, Any]]:
    listed = await etcdctl(ctx, via, "member", "list")
    return list((listed or {}).get("members") or [])


def _by_peer(members: Sequence[Mapping[str, Any]], url: str) -> Mapping[str, Any] | None:
    return next((m for m in members if url in (m.get("peerURLs") or [])), None)


async def _leader(ctx: Context, via: str) -> int | None:
    status = await etcdctl(ctx, via, "endpoint", "status")
    return int(status[0]["Status"]["leader"]) if status else None


@hooks.values()
async def one_member_at_a_time(ctx: Context) -> None:
    """Render at most one member more or fewer than the StatefulSet runs (see above)."""
    if "size" not in ctx.values:
        return
    live = await ctx.kube.get("apps/v1", "StatefulSet", statefulset(ctx), ctx.namespace)
    replicas = None if live is None else int((live.get("spec") or {}).get("replicas", 1))
    ctx.values["size"] = next_size(replicas, int(ctx.values["size"]))


@hooks.before("upgrade", timeout=STEP_TIMEOUT)
async def change_membership(ctx: Context) -> None:
    """Refuse a version etcd cannot move to in place; add the member the upgrade will start (as a
    learner) or remove the one it will stop (the leader hands over first)."""
    running, wanted = _running_version(ctx), str(ctx.values.get("version", ""))
    why = version_change(running, wanted) if running and wanted else None
    if why is not None:
        raise InvalidSpec("spec.version", f"{why}; the cluster keeps running {running}")
    if (
        running
        and wanted
        and running != wanted
        and int(ctx.values.get("size", 1)) == 1
        and not _persistent(ctx)
    ):
        raise InvalidSpec(
            "spec.version",
            f"{running} to {wanted} restarts the only member, which has no data volume: every key would be "
            "lost; set spec.pod.persistentVolumeClaimSpec or grow to 3 members first",
        )
    live = await ctx.kube.get("apps/v1", "StatefulSet", statefulset(ctx), ctx.namespace)
    if live is None:
        return
    replicas, size = int((live.get("spec") or {}).get("replicas", 1)), int(ctx.values["size"])
    if size == replicas:
        return
    name, via = statefulset(ctx), f"{statefulset(ctx)}-0"
    members = await _members(ctx, via)
    if size == replicas + 1:
        url = _peer_url(ctx, replicas)
        for learner in (m for m in members if m.get("isLearner") and url not in (m.get("peerURLs") or [])):
            try:  # the previous step's, if it caught up since: etcd takes one learner at a time
                await etcdctl(ctx, via, "member", "promote", _hex(learner["ID"]))
            except ExecFailed:
                raise TemporaryError(
                    f"waiting for learner {_member_name(learner)} to catch up", delay=5.0
                ) from None
        # A volume left by a member of this ordinal removed earlier: the new one starts empty.
        await _drop_stale_claims(ctx, replicas)
        if _by_peer(members, url) is None:
            await etcdctl(ctx, via, "member", "add", f"{name}-{replicas}", f"--peer-urls={url}", "--learner")
            await ctx.event(
                "MemberAdded", f"{name}-{replicas} joins as a learner ({len(members) + 1} members)"
            )
    elif size == replicas - 1:
        gone = _by_peer(members, _peer_url(ctx, size))
        if gone is not None:
            if await _leader(ctx, via) == int(gone["ID"]):  # hand over first: no election to wait for
                voter = next(m for m in members if not m.get("isLearner") and m["ID"] != gone["ID"])
                await etcdctl(ctx, f"{name}-{size}", "move-leader", _hex(voter["ID"]))  # asked of the leader
            await etcdctl(ctx, via, "member", "remove", _hex(gone["ID"]))
            await ctx.event("MemberRemoved", f"{name}-{size} left the cluster ({len(members) - 1} members)")
    ctx.day2["members"] = {"from": replicas, "to": size, "size": int(ctx.spec.get("size", size))}
    await ctx.day2.save()


def _member_name(member: Mapping[str, Any]) -> str:
    """A member's name, or its peer URL before it has started (etcd names it then)."""
    return str(member.get("name") or (member.get("peerURLs") or ["?"])[0])


async def _drop_stale_claims(ctx: Context, replicas: int) -> None:
    name = statefulset(ctx)
    claims = await ctx.kube.list("v1", "PersistentVolumeClaim", ctx.namespace, labels=_selector(ctx))
    for claim_name in stale_claims([str(c["metadata"]["name"]) for c in claims], name, replicas):
        if await ctx.kube.get("v1", "Pod", claim_name.removeprefix("data-"), ctx.namespace) is None:
            await ctx.kube.delete("v1", "PersistentVolumeClaim", claim_name, ctx.namespace)


async def _promote_learners(ctx: Context, via: str) -> None:
    """Promote each learner once it has caught up (etcd refuses until then). One that has not
    within STEP_TIMEOUT stays a learner, which does not count towards quorum: the cluster serves,
    and the next step's upgrade waits for it (one learner at a time)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STEP_TIMEOUT
    while learners := [m for m in await _members(ctx, via) if m.get("isLearner")]:
        for learner in learners:
            try:
                await etcdctl(ctx, via, "member", "promote", _hex(learner["ID"]))
                await ctx.event("MemberPromoted", f"{_member_name(learner)} votes")
            except ExecFailed as exc:
                if loop.time() >= deadline:
                    raise TemporaryError(
                        f"learner {_member_name(learner)} has not caught up within {STEP_TIMEOUT:g}s "
                        f"({exc}); it stays a learner (no vote, quorum unchanged) until it does"
                    ) from None
        await asyncio.sleep(2.0)


def _persistent(ctx: Context) -> bool:
    """Whether the members keep their data across a restart (a volume per member)."""
    return bool(((ctx.values or dict(ctx.spec)).get("pod") or {}).get("persistentVolumeClaimSpec"))


async def _hand_over(ctx: Context, pod: str, upgraded: Sequence[str]) -> None:
    """Before ``pod`` restarts: if it leads, move leadership to a voter already upgraded (any other
    voter if none is yet); without a data volume, replace it (see above)."""
    members = await _members(ctx, pod)
    me = next((m for m in members if m.get("name") == pod), None)
    if me is None:
        return
    voters = [m for m in members if not m.get("isLearner") and m.get("name") and m is not me]
    if await _leader(ctx, pod) == int(me["ID"]):
        to = next((m for m in voters if m["name"] in upgraded), None) or next(iter(voters), None)
        if to is not None:  # (a single member has no one to hand over to)
            await etcdctl(ctx, pod, "move-leader", _hex(to["ID"]))  # asked of the leader itself
            await ctx.event("LeaderMoved", f"{pod} hands leadership to {to['name']} before it restarts")
    if not _persistent(ctx) and voters:
        via = voters[0]["name"]
        url = _peer_url(ctx, int(pod.rsplit("-", 1)[1]))
        await etcdctl(ctx, via, "member", "remove", _hex(me["ID"]))
        for attempt in range(10):  # etcd refuses a change until the cluster has settled after one
            try:
                await etcdctl(ctx, via, "member", "add", pod, f"--peer-urls={url}", "--learner")
                break
            except ExecFailed:
                if attempt == 9:
                    raise
                await asyncio.sleep(3.0)
        await ctx.event("MemberReplaced", f"{pod} has no data volume: it rejoins empty, as a learner")


async def _restarted_healthy(ctx: Context, pod: str) -> str | None:
    """A member is healthy (see ``_member_healthy``); a learner (a replaced member) is promoted
    once it has caught up (asked of another member: a learner answers no linearizable request)."""
    ordinal = int(pod.rsplit("-", 1)[1])
    try:
        members = await _members(ctx, f"{statefulset(ctx)}-{0 if ordinal else 1}")
    except ExecFailed:
        members = []  # a single member, or that one restarting: the member answers for itself
    me = _by_peer(members, _peer_url(ctx, ordinal))
    if me is not None and me.get("isLearner"):
        try:
            await etcdctl(
                ctx, f"{statefulset(ctx)}-{0 if ordinal else 1}", "member", "promote", _hex(me["ID"])
            )
        except ExecFailed as exc:
            return f"a learner catching up ({exc})"
        await ctx.event("MemberPromoted", f"{pod} votes")
    return await _member_healthy(ctx, pod)


async def _step(ctx: Context) -> Mapping[str, Any]:
    """The resize step the before hook recorded (read again: it saved it after this context was made)."""
    api_version, kind = ctx.resource["apiVersion"], ctx.resource["kind"]
    now = await ctx.kube.get(api_version, kind, ctx.name, ctx.namespace) or {}
    return dict(((now.get("status") or {}).get("day2") or {}).get("members") or {})


async def _member_healthy(ctx: Context, pod: str) -> str | None:
    """A member serves (a linearizable read through it answers) and votes (not a learner)."""
    try:
        health = await etcdctl(ctx, pod, "endpoint", "health")
        status = await etcdctl(ctx, pod, "endpoint", "status")
    except ExecFailed as exc:
        return f"etcdctl: {exc}"
    if not health or not health[0].get("health"):
        return f"unhealthy: {(health or [{}])[0].get('error', 'no answer')}"
    if status and status[0]["Status"].get("isLearner"):
        return "still a learner"
    return None


@hooks.after("upgrade", timeout=STEP_TIMEOUT * 5)
async def finish_step(ctx: Context) -> None:
    """Promote the member the upgrade started; delete the data volume of one it removed (a later
    member of that ordinal must start empty); restart members on a new version one at a time."""
    name = statefulset(ctx)
    live = await ctx.kube.get("apps/v1", "StatefulSet", name, ctx.namespace)
    if live is None:
        return
    via = f"{name}-0"
    step = await _step(ctx)
    if step.get("to", 0) > step.get("from", 0):
        await _promote_learners(ctx, via)
    replicas = int((live.get("spec") or {}).get("replicas", 1))
    await _drop_stale_claims(ctx, replicas)
    if await rolling.outdated(ctx, name, needs_restart) or rolling.unfinished(ctx, name):
        # exec only when there is a roll (KWOK runs no etcd)
        leader = await _leader(ctx, via)
        members = await _members(ctx, via)
        last = next((m.get("name") for m in members if leader is not None and int(m["ID"]) == leader), None)
        await rolling.roll(
            ctx,
            name,
            check=lambda pod: _restarted_healthy(ctx, pod),
            last=last,
            restart=needs_restart,
            handover=lambda pod, upgraded: _hand_over(ctx, pod, upgraded),
            timeout=STEP_TIMEOUT,
        )
    if step:
        wanted = int(ctx.spec.get("size", replicas))
        ctx.day2["members"] = (
            {"from": replicas, "to": replicas, "size": wanted} if wanted != replicas else None
        )
        await ctx.day2.save()


def _selector(ctx: Context) -> dict[str, str]:
    return {"app.kubernetes.io/instance": ctx.release_name}
