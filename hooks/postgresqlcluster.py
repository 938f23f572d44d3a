"""Day-2 hooks of PostgreSQLCluster: scheduled and on-demand backups with retention, a final
backup before the release is uninstalled, restore into a new cluster, primary failover, and
version (or configuration) changes that restart the standbys first and the primary last, after a
switchover.

Backups are ``pg_dump`` Jobs writing ``<backup>.sql.gz`` to the PersistentVolumeClaim
``<cluster>-backups``, which is not owned by the cluster (the backups outlive it). A restore runs
before the StatefulSet exists: a Job builds instance 0's data volume from the dump. The primary
is the Pod labelled ``postgresql.example.com/role=primary`` (the client Service selects it); when
it is not Ready for ``failoverDelay`` (at once when its Pod is being deleted) the Ready standby that
has received the most of its log is promoted (the chart's instances watch their own labels and run
``pg_ctl promote``); with ``replication.mode: sync`` a commit waits for a standby, so that standby
has every acknowledged write. An instance that starts again is read-only until told a newer word:
a primary whose server stopped unasked starts again in place (its container does not restart, so
no kubelet back-off) and, like one whose container restarted, is confirmed once it has started
again (it is Ready only once writable), or replaced if the delay passes first
(``failover.keep_primary`` with a ``RoleFile`` whose ``serving`` word tells a restarted server
from the promoted one). A demoted primary, or a standby off the new primary's timeline, starts
again in place as a standby (rewound with ``pg_rewind``).

Spec fields used: ``backup.schedule`` (5-field cron), ``backup.retention`` (30d, 12h, 4w),
``backup.maxBackups``, ``backup.storage`` (size of the backup volume, default 1Gi),
``restore.fromBackup`` (a backup name another cluster recorded, or ``pvc://<claim>/<file>``),
``failoverDelay`` (30s, 2m; default 30s), ``replication.mode`` (async, sync: read by the chart),
``backup.verifySchedule`` (5-field cron: verify the
newest backup). Annotations: ``helm-operator.io/skip-final-backup: "true"`` skips the final
backup; ``helm-operator.io/action: switchover=<pod>`` moves the primary, ``verify-backup``
verifies the newest backup.

A verification restores the newest dump into a throw-away PostgreSQL (one Job: the cluster's image,
placed where its instances run, its data on the Pod's own scratch volume), asks it ``CHECK`` and
deletes it; ``status.day2.lastVerifiedBackup`` says how it went and how long the restore took.

Every value reaches a Job as one argv element or an environment variable (``jobs.command``,
``jobs.shell`` with a constant ``Script``), never as shell text; ``validate`` checks their shapes.
"""

from __future__ import annotations

import re
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
    SecretKey,
    TemporaryError,
    backup,
    bounded,
    failover,
    jobs,
    parse_age,
    parse_count,
    rolling,
    shapes,
    verify,
)

SKIP_FINAL_BACKUP = "helm-operator.io/skip-final-backup"
ROLE = "postgresql.example.com/role"
DEFAULT_FAILOVER_DELAY = 30.0
# An instance stops when its primary label goes (the chart): the new primary is labelled only
# once the old one has stopped serving, so never two are writable and no acknowledged write is lost.
FENCE = 60.0
# Each instance is also told its role at once (the chart's memory volume), not only when the
# kubelet next copies its labels: a promotion or a demotion takes effect in about a second. It says
# in ``serving`` which word its running server started with (the fence reads it: a demoted primary
# starts again in place, its container not restarted).
TOLD = failover.RoleFile("/run/role/role", container="postgres", serving="/run/role/serving")
IDENTIFIER = shapes.Shape(
    "^[A-Za-z_][A-Za-z0-9_$]{0,62}$", "a PostgreSQL identifier (a letter or _, then a-z, 0-9, _, $)", 63
)

# libpq reads PGHOST, PGUSER and PGDATABASE; the backup's name is $BACKUP. Written, then
# compressed: in ``pg_dump | gzip`` the pipeline's status is gzip's, so a failed dump would pass.
# Before it is compressed, what it holds is written beside it (``<file>.contents``): for each COPY
# block (a table's rows), the number of rows, the md5 of those lines as COPY wrote them, and the
# COPY statement; the Job's termination message names the tables, the rows and the sha256 of that
# record, which the backup's status record keeps. A verification compares the restored data with it.
DUMP = Script(
    """
export PGTZ=UTC
pg_dump --no-password --file="/backups/$BACKUP.sql" || { rm -f "/backups/$BACKUP.sql"; exit 1; }
rm -rf /tmp/blocks && mkdir -p /tmp/blocks
awk '/^COPY .* FROM stdin;$/ {
       n++; f = sprintf("/tmp/blocks/%08d", n); print > (f ".copy"); printf "" > f; on = 1; next
     }
     on && $0 == "\\\\." { on = 0; close(f); next }
     on { print > f }' "/backups/$BACKUP.sql"
contents="/backups/$BACKUP.sql.gz.contents"
: > "$contents.new"
for copy in /tmp/blocks/*.copy; do
  [ -e "$copy" ] || continue
  wc -l < "${copy%.copy}" > /tmp/rows
  md5sum < "${copy%.copy}" | cut -d' ' -f1 > /tmp/md5
  paste /tmp/rows /tmp/md5 "$copy" >> "$contents.new"
done
mv -f "$contents.new" "$contents"
gzip -f "/backups/$BACKUP.sql"
awk -F '\\t' '{ t++; r += $1 } END { printf "%d rows in %d table(s); ", r, t }' "$contents" > /tmp/holds
sha256sum < "$contents" | awk '{ printf "contents sha256 %s\\n", $1 }' >> /tmp/holds
cp /tmp/holds /dev/termination-log
"""
)

# Instance 0's data directory from the dump $SOURCE, before the database runs; the superuser gets
# the cluster's password ($POSTGRES_PASSWORD, from its Secret), as the instances' own initdb does.
RESTORE = Script(
    """
if [ -s "$PGDATA/PG_VERSION" ]; then echo "$PGDATA already holds a database" >&2; exit 1; fi
chgrp postgres /var/lib/postgresql && chmod g+rwx /var/lib/postgresql  # as fsGroup would
mkdir -p "$PGDATA" && chown postgres:postgres "$PGDATA" && chmod 0700 "$PGDATA"
if [ -n "${POSTGRES_PASSWORD:-}" ]; then
  printf '%s\\n' "$POSTGRES_PASSWORD" >/tmp/pwfile && chown postgres /tmp/pwfile
  gosu postgres initdb -D "$PGDATA" -U "$PGUSER" --pwfile=/tmp/pwfile
  rm -f /tmp/pwfile
else
  gosu postgres initdb -D "$PGDATA" -U "$PGUSER"
fi
gosu postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
gosu postgres createdb -h /var/run/postgresql -U "$PGUSER" -- "$PGDATABASE" || true
gunzip -c "/backups/$SOURCE" | gosu postgres psql -h /var/run/postgresql -v ON_ERROR_STOP=1 \
  -U "$PGUSER" -d "$PGDATABASE"
gosu postgres pg_ctl -D "$PGDATA" -m fast -w stop
"""
)

# The newest dump ($SOURCE) restored into a throw-away server on the scratch volume, then asked
# $CHECK (the query below, never a spec value), which must answer t. Integrity is tested first:
# in ``gunzip -c | psql`` the status is psql's, and a truncated dump may end between statements.
# With $CONTENTS (the sha256 the backup recorded), every table is then read back as COPY writes it
# and compared with the record beside the dump: its rows and their md5 (a dump cut short that
# still restores has fewer). Only these fixed sentences, which name tables and never rows, reach
# the status (termination log); psql's own errors, which may quote rows, stay in the Pod's log.
VERIFY = Script(
    """
say() { printf '%s\\n' "$1" >/dev/termination-log; echo "$1" >&2; }
export PGTZ=UTC
gunzip -t "/backups/$SOURCE" || { say "$SOURCE is not a complete gzip file"; exit 1; }
export PGDATA=/scratch/pgdata
mkdir -p "$PGDATA" && chown postgres:postgres "$PGDATA" && chmod 0700 "$PGDATA"
gosu postgres initdb -D "$PGDATA" -U "$PGUSER" >/dev/null
gosu postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -l /scratch/server.log -w start >/dev/null
gosu postgres createdb -h /var/run/postgresql -U "$PGUSER" -- "$PGDATABASE" 2>/dev/null || true
gunzip -c "/backups/$SOURCE" | gosu postgres psql -h /var/run/postgresql -q -v ON_ERROR_STOP=1 \
  -U "$PGUSER" -d "$PGDATABASE" >/dev/null || { say "$SOURCE did not restore (psql stopped)"; exit 1; }
gosu postgres psql -h /var/run/postgresql -v ON_ERROR_STOP=1 -U "$PGUSER" -d "$PGDATABASE" -tA \
  -c "$CHECK" >/scratch/answer || { say "the check query failed on the restored $SOURCE"; exit 1; }
grep -qx t /scratch/answer || { say "the check found no table in the restored $SOURCE"; exit 1; }
if [ -n "${CONTENTS:-}" ]; then
  record="/backups/$SOURCE.contents"
  [ -e "$record" ] || { say "no record of what $SOURCE held is beside it"; exit 1; }
  sha256sum < "$record" | cut -d' ' -f1 | grep -qxF -- "$CONTENTS" \\
    || { say "the record of what $SOURCE held changed after the backup"; exit 1; }
  while read -r rows sum copy; do
    table="${copy#COPY }"; table="${table%% *}"
    gosu postgres psql -h /var/run/postgresql -v ON_ERROR_STOP=1 -U "$PGUSER" -d "$PGDATABASE" \\
      -c "${copy% FROM stdin;} TO STDOUT" </dev/null >/scratch/rows \\
      || { say "$table could not be read back from the restored $SOURCE"; exit 1; }
    wc -l < /scratch/rows | awk -v want="$rows" -v t="$table" -v s="$SOURCE" '$1 != want {
        printf "%s: %s rows restored from %s, %s when it was taken\\n", t, $1, s, want; exit 1
      }' > /scratch/why || { cp /scratch/why /dev/termination-log; cat /scratch/why >&2; exit 1; }
    md5sum < /scratch/rows | cut -d' ' -f1 | grep -qxF -- "$sum" \\
      || { say "$table: the rows restored from $SOURCE differ from those it was taken with"; exit 1; }
  done < "$record"
  echo "restored $SOURCE; every table holds the rows it was taken with"
else
  echo "restored $SOURCE; the check answered (the backup recorded nothing to compare with)"
fi
"""
)
# What a restored dump must answer: it holds at least one table of the application's.
CHECK = (
    "SELECT count(*) > 0 FROM pg_catalog.pg_tables"
    " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
)

hooks = Hooks()

# --- policy: what the spec asks for -----------------------------------------------------------


def retention(spec: Mapping[str, Any]) -> Retention:
    policy = spec.get("backup") or {}
    return Retention(
        max_age=parse_age(policy.get("retention"), "spec.backup.retention"),
        max_count=parse_count(policy.get("maxBackups"), "spec.backup.maxBackups"),
    )


def failover_delay(spec: Mapping[str, Any]) -> float:
    raw = spec.get("failoverDelay")
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return float(raw)
    age = parse_age(raw, "spec.failoverDelay")
    return age.total_seconds() if age is not None else DEFAULT_FAILOVER_DELAY


def database_pod(pod: Mapping[str, Any]) -> bool:
    return (pod["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "database"


@hooks.validate()
async def check_backup_policy(ctx: Context) -> None:
    retention(ctx.spec)
    failover_delay(ctx.spec)
    source = (ctx.spec.get("restore") or {}).get("fromBackup")
    if source is not None:
        shapes.VOLUME_LOCATION.check(source, "spec.restore.fromBackup")
    auth = ctx.spec.get("auth") or {}
    for key in ("username", "database"):
        if auth.get(key) is not None:
            IDENTIFIER.check(auth[key], f"spec.auth.{key}")
    if ctx.spec.get("imageRepository") is not None:
        shapes.IMAGE_REPOSITORY.check(ctx.spec["imageRepository"], "spec.imageRepository")


@hooks.schedule("backup", cron="spec.backup.schedule")
async def scheduled_backup(ctx: Context) -> None:
    await take(ctx, ctx.run, keep=retention(ctx.spec))


@hooks.action("backup-now")
async def backup_now(ctx: Context) -> None:
    await take(ctx, ctx.run, keep=retention(ctx.spec))


@hooks.schedule("verify", cron="spec.backup.verifySchedule")
async def scheduled_verification(ctx: Context) -> None:
    """Verify the newest backup on ``backup.verifySchedule`` (none yet: an Event, no failure)."""
    await verify.verify_latest(ctx, lambda name, record: verify_job(ctx, name, record), require=False)


@hooks.action("verify-backup")
async def verify_backup(ctx: Context) -> None:
    """``helm-operator.io/action: verify-backup``: verify the newest backup now."""
    await verify.verify_latest(ctx, lambda name, record: verify_job(ctx, name, record))


@hooks.before("uninstall", timeout=1800)
async def final_backup(ctx: Context) -> None:
    if ctx.annotations.get(SKIP_FINAL_BACKUP) == "true":
        await ctx.event("FinalBackupSkipped", f"{SKIP_FINAL_BACKUP}=true: no final backup")
        return
    await take(ctx, bounded(f"{ctx.name}-final", ctx.uid[:8] or "0"))


@hooks.before("install", timeout=120)
async def restore_from_backup(ctx: Context) -> None:
    """Before the StatefulSet exists: fill instance 0's volume from the backup (the install waits)."""
    values = ctx.values or dict(ctx.spec)
    data = Claim(
        f"data-{statefulset(ctx)}-0",
        str(values.get("storage") or "8Gi"),
        values.get("storageClassName") or None,
        role="data",
    )
    await backup.restore_before_install(
        ctx, lambda name, at: restore_job(ctx, name, at), claims=lambda: [data]
    )


# How far a standby has received the primary's log (and replayed it: a standby whose receiver
# has not run since its start has only what it replayed).
RECEIVED_QUERY = (
    "SELECT pg_wal_lsn_diff(greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()), '0/0')::bigint"
)


def lsn(position: int) -> str:
    """A position in the log as PostgreSQL writes it (``pg_current_wal_lsn()``: ``16/B374D848``)."""
    return f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"


async def received(ctx: Context, pods: Sequence[str]) -> dict[str, int]:
    """Each standby's position in the primary's log, asked over its local socket (a failover
    promotes the most advanced: with synchronous replication it has every acknowledged write); one
    that does not answer is left out."""
    user = _libpq(ctx)["PGUSER"]
    argv = ["psql", "-h", "/var/run/postgresql", "-U", user, "-d", "postgres", "-tAc", RECEIVED_QUERY]
    out: dict[str, int] = {}
    for pod in pods:
        try:
            said = await ctx.kube.exec(pod, str(ctx.namespace), argv, container="postgres", timeout=5)
        except ExecFailed as exc:
            ctx.log.info("could not ask %s how far it has received the log (%s)", pod, exc)
            continue
        if said.strip().isdigit():
            out[pod] = int(said.strip())
    return out


@hooks.watch("v1", "Pod", when=database_pod, beside_helm=True, timeout=FENCE + 30)
async def elect_primary(ctx: Context) -> None:
    """Keep exactly one Ready primary: label the first, promote the most advanced standby after
    ``failoverDelay``. Beside Helm: the install waits for the standbys, which wait for a primary
    to clone."""
    await failover.keep_primary(
        ctx,
        ROLE,
        failover_delay(ctx.spec),
        database_pod,
        fence=FENCE,
        tell=TOLD,
        rank=lambda pods: received(ctx, pods),
        show=lsn,
    )


@hooks.action("switchover")
async def switchover(ctx: Context) -> None:
    """``helm-operator.io/action: switchover=<pod>``: make that Ready standby the primary."""
    await failover.switchover(ctx, ROLE, database_pod, fence=FENCE, tell=TOLD)


# --- version changes --------------------------------------------------------------------------
# The chart's StatefulSet is OnDelete: Helm's upgrade changes its template only, and the instances
# restart one at a time (rolling.roll), the standbys first, each Ready and streaming from the
# primary before the next goes. The primary goes last: first it hands over to a restarted standby
# (a switchover: it stops before the standby is promoted, so no acknowledged write is lost), then
# it restarts as a standby of the new primary. Clients see one switchover's window, not a failover.

ROLL_STEP = 300.0  # seconds an instance may take to restart and stream again
# Asked of an instance over its local socket: "primary", or a standby's WAL receiver status
# ("streaming" once it follows the primary).
ROLE_QUERY = (
    "SELECT CASE WHEN NOT pg_is_in_recovery() THEN 'primary' "
    "ELSE coalesce((SELECT status FROM pg_stat_wal_receiver), 'not streaming') END"
)


def major(version: str) -> str:
    """PostgreSQL's major version of a ``version`` value ("15" of "15", "15.14")."""
    return version.split(".")[0]


def version_change(running: str, wanted: str) -> str | None:
    """Why the instances cannot move from ``running`` to ``wanted`` by restarting (None: they can)."""
    if major(running) != major(wanted):
        return (
            f"{running} to {wanted} changes the major version: the data directory must be converted "
            "(pg_upgrade, or a new cluster restored from a backup with restore.fromBackup); "
            "a restart on the new image would not start"
        )
    return None


def _running_image(ctx: Context) -> str | None:
    """The image the deployed release runs PostgreSQL with (its StatefulSet's container)."""
    for sts in ctx.release.find("StatefulSet") if ctx.release is not None else []:
        for container in sts.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            if container.get("name") == "postgres" and container.get("image"):
                return str(container["image"])
    return None


def _running_version(ctx: Context) -> str | None:
    """The version the deployed release runs (its StatefulSet's image tag)."""
    image = _running_image(ctx)
    return (image.rpartition(":")[2] or None) if image else None


@hooks.before("upgrade", timeout=30)
async def refuse_major_change(ctx: Context) -> None:
    """A new major version is refused before Helm changes anything (see ``version_change``)."""
    running, wanted = _running_version(ctx), str(ctx.values.get("version", ""))
    why = version_change(running, wanted) if running and wanted else None
    if why is not None:
        raise InvalidSpec("spec.version", f"{why}; the cluster keeps running {running}")


def _is_primary(pod: Mapping[str, Any]) -> bool:
    """Whether the Pod carries the primary's role label (what the client Service selects)."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(ROLE) == "primary"


async def _role(ctx: Context, pod: str) -> str:
    user = _libpq(ctx)["PGUSER"]  # one argv element: no shell
    argv = ["psql", "-h", "/var/run/postgresql", "-U", user, "-d", "postgres", "-tAc", ROLE_QUERY]
    return (await ctx.kube.exec(pod, str(ctx.namespace), argv, container="postgres", timeout=10)).strip()


async def _instance_healthy(ctx: Context, pod: str) -> str | None:
    """The primary answers as one; a standby streams from it."""
    labelled = _is_primary(await ctx.kube.get("v1", "Pod", pod, ctx.namespace) or {})
    try:
        role = await _role(ctx, pod)
    except ExecFailed as exc:
        return f"does not answer ({exc})"
    if labelled:
        return None if role == "primary" else f"labelled primary but {role}"
    return None if role == "streaming" else f"a standby, {role}"


async def _hand_over(ctx: Context, pod: str, restarted: Sequence[str]) -> None:
    """Before ``pod`` restarts: if it is the primary, switch over to a restarted standby that streams."""
    pods = [
        p
        for p in await ctx.kube.list("v1", "Pod", ctx.namespace, labels=ctx.owner_selector)
        if database_pod(p)
    ]
    primary = next((p for p in pods if _is_primary(p)), None)
    if primary is None or primary["metadata"]["name"] != pod or len(pods) == 1:
        return  # not the primary, or the only instance: it restarts as it is (no one to hand over to)
    for target in sorted(restarted):
        if await _instance_healthy(ctx, target) is None:
            # Alone: the failover hook, which runs beside Helm's upgrade and its hooks, would
            # otherwise see the demoted primary still Ready and give it the label back.
            async with ctx.alone():
                await failover.switchover(ctx, ROLE, database_pod, fence=FENCE, tell=TOLD, to=target)
            return
    raise TemporaryError(f"no restarted standby of {', '.join(restarted) or 'none'} streams yet", delay=5.0)


@hooks.after("upgrade", timeout=ROLL_STEP * 5)
async def restart_instances(ctx: Context) -> None:
    """Restart the instances on the new template: standbys first, the primary last after a
    switchover (see above)."""
    name = statefulset(ctx)
    if not await rolling.outdated(ctx, name) and not rolling.unfinished(ctx, name):
        return  # exec only when there is a roll (KWOK runs no PostgreSQL)
    pods = await ctx.kube.list("v1", "Pod", ctx.namespace, labels=ctx.owner_selector)
    primary = next((p["metadata"]["name"] for p in pods if _is_primary(p)), None)
    await rolling.roll(
        ctx,
        name,
        check=lambda pod: _instance_healthy(ctx, pod),
        last=primary,
        handover=lambda pod, restarted: _hand_over(ctx, pod, restarted),
        timeout=ROLL_STEP,
    )


# --- the Jobs ---------------------------------------------------------------------------------


def claim(ctx: Context) -> str:
    return bounded(ctx.name, "backups")


def statefulset(ctx: Context) -> str:
    """The chart's StatefulSet name (``postgresqlcluster.fullname``)."""
    return ctx.release_name[:52].rstrip("-")


def _image(ctx: Context) -> str:
    """The image of the tools a Job runs against the cluster: the one the cluster runs, not the
    spec's (a version change refused, or not rolled out yet, may name an image the nodes lack, and
    a final backup waiting for it would hold the uninstall for good)."""
    running = _running_image(ctx)
    if running is not None:
        return running
    values = ctx.values or dict(ctx.spec)
    return f"{values.get('imageRepository', 'postgres')}:{values.get('version', '17')}"


def _libpq(ctx: Context) -> dict[str, str]:
    """Where and as whom the client tools connect (libpq reads these)."""
    auth = (ctx.values or dict(ctx.spec)).get("auth") or {}
    return {
        "PGHOST": ctx.name,  # the client Service: the primary
        "PGUSER": str(auth.get("username", "postgres")),
        "PGDATABASE": str(auth.get("database", "app")),
    }


def password(ctx: Context) -> SecretKey | None:
    """The superuser's password where the chart keeps it (``auth.existingSecret``, or the Secret it
    makes from ``auth.password``); None when the cluster trusts connections without one."""
    auth = (ctx.values or dict(ctx.spec)).get("auth") or {}
    if not (auth.get("existingSecret") or auth.get("password")):
        return None
    secret = auth.get("existingSecret") or f"{ctx.release_name}-auth"[:63].rstrip("-")
    return SecretKey(str(secret), str(auth.get("secretKey") or "password"))


def _backups(claim_name: str, *, read_only: bool = False) -> dict[str, Any]:
    pvc: dict[str, Any] = {"claimName": claim_name}
    if read_only:
        pvc["readOnly"] = True
    return {"name": "backups", "persistentVolumeClaim": pvc}


async def take(ctx: Context, name: str, keep: Retention | None = None) -> None:
    """A dump to the backups volume (made if missing); with ``keep``, pruned after it."""
    size = str((ctx.spec.get("backup") or {}).get("storage") or "1Gi")
    await backup.take_and_prune(
        ctx,
        name,
        dump_job(ctx, name),
        f"pvc://{claim(ctx)}/{name}.sql.gz",
        claim=Claim(claim(ctx), size),
        keep=keep,
        cleanup=lambda gone: backup.remove_files(ctx, with_contents(gone), _image(ctx)),
    )


def with_contents(gone: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pruned backups and, beside each dump, its record of what it held (its files to remove)."""
    beside = [{**r, "location": f"{r['location']}.contents"} for r in gone if r.get("location")]
    return [*gone, *beside]


def dump_job(ctx: Context, name: str) -> dict[str, Any]:
    secret = password(ctx)
    dump = jobs.shell(
        "backup",
        _image(ctx),
        DUMP,
        env={**_libpq(ctx), "BACKUP": name},
        mounts={"backups": "/backups"},
        secrets={"PGPASSWORD": secret} if secret else None,
    )
    return backup.job(ctx, name, "backup", [dump], volumes=[_backups(claim(ctx))])


def restore_job(ctx: Context, name: str, location: str) -> dict[str, Any]:
    """Initialise instance 0's data directory from a dump (the database is not running yet)."""
    claim_name, _, file = location.removeprefix("pvc://").partition("/")
    env = {**_libpq(ctx), "SOURCE": file, "PGDATA": "/var/lib/postgresql/pgdata"}
    mounts = {"backups": "/backups", "data": "/var/lib/postgresql"}
    # Before the install the chart has not made its Secret yet: a password given in the spec is
    # passed as it is (it is in the resource already); an existing Secret is read by reference.
    auth = (ctx.values or dict(ctx.spec)).get("auth") or {}
    secret = password(ctx) if auth.get("existingSecret") else None
    if secret is None and auth.get("password"):
        env["POSTGRES_PASSWORD"] = str(auth["password"])
    restore = jobs.shell(
        "restore",
        _image(ctx),
        RESTORE,
        env=env,
        mounts=mounts,
        secrets={"POSTGRES_PASSWORD": secret} if secret else None,
    )
    volumes = [
        _backups(claim_name, read_only=True),
        {"name": "data", "persistentVolumeClaim": {"claimName": f"data-{statefulset(ctx)}-0"}},
    ]
    return backup.job(
        ctx, name, "restore", [restore], volumes=volumes, pod={"securityContext": {"fsGroup": 999}}
    )


def verify_job(ctx: Context, name: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """The throw-away instance that restores the dump ``record`` names and asks it ``CHECK``."""
    location = str(record["location"])
    if not location.startswith("pvc://"):
        raise PermanentError(
            f"backup {record['name']}: cannot verify {location}: expected pvc://<claim>/<file>"
        )
    claim_name, _, file = location.removeprefix("pvc://").partition("/")
    libpq = _libpq(ctx)  # no PGHOST: the instance answers on its own socket, never the cluster's
    env = {"PGUSER": libpq["PGUSER"], "PGDATABASE": libpq["PGDATABASE"], "SOURCE": file, "CHECK": CHECK}
    held = re.search(r"contents sha256 ([0-9a-f]{64})", str(record.get("holds") or ""))
    if held is not None:
        env["CONTENTS"] = held.group(1)
    run = jobs.shell(
        "verify", _image(ctx), VERIFY, env=env, mounts={"backups": "/backups", verify.SCRATCH: "/scratch"}
    )
    return verify.instance(ctx, name, [run], volumes=[_backups(claim_name, read_only=True)])
