"""Day-2 hooks of EtcdCluster: periodic snapshots with count-based retention, and restore of a new
cluster from a snapshot — on the same Job machinery as PostgreSQLCluster's backups.

Snapshots are ``etcdctl snapshot save`` Jobs every ``backup.backupIntervalInSecond`` (0 or absent:
none), kept ``backup.maxBackups`` deep (0 or absent: all). ``backup.storageType: S3`` uploads them
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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from helm_operator.hooks import (
    Claim,
    Context,
    Hooks,
    InvalidSpec,
    PermanentError,
    Retention,
    Script,
    backup,
    bounded,
    jobs,
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
