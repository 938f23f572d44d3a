"""Day-2 hooks of PostgreSQLCluster: scheduled and on-demand backups with retention, and a final
backup before the release is uninstalled.

Backups are ``pg_dump`` Jobs writing ``<backup>.sql.gz`` to the PersistentVolumeClaim
``<cluster>-backups``, which is not owned by the cluster (the backups outlive it).

Spec fields used: ``backup.schedule`` (5-field cron), ``backup.retention`` (30d, 12h, 4w),
``backup.maxBackups``, ``backup.storage`` (size of the backup volume, default 1Gi).
Annotation ``helm-operator.io/skip-final-backup: "true"`` skips the final backup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from helm_operator.hooks import Context, Hooks, bounded
from helm_operator.hooks.builtin import backup
from helm_operator.hooks.builtin.retention import Retention, parse_age, parse_count

SKIP_FINAL_BACKUP = "helm-operator.io/skip-final-backup"

hooks = Hooks()


def retention(spec: Mapping[str, Any]) -> Retention:
    policy = spec.get("backup") or {}
    return Retention(
        max_age=parse_age(policy.get("retention"), "spec.backup.retention"),
        max_count=parse_count(policy.get("maxBackups"), "spec.backup.maxBackups"),
    )


def claim(ctx: Context) -> str:
    return bounded(ctx.name, "backups")


def _pod(ctx: Context, name: str, script: str) -> dict[str, Any]:
    values = ctx.values or dict(ctx.spec)
    image = f"{values.get('imageRepository', 'postgres')}:{values.get('version', '17')}"
    auth = values.get("auth") or {}
    env = [
        {"name": "PGHOST", "value": ctx.name},  # the client Service: the primary
        {"name": "PGUSER", "value": str(auth.get("username", "postgres"))},
        {"name": "PGDATABASE", "value": str(auth.get("database", "app"))},
        {"name": "BACKUP", "value": name},
    ]
    return {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "backup",
                "image": image,
                "command": ["/bin/sh", "-ec", script],
                "env": env,
                "volumeMounts": [{"name": "backups", "mountPath": "/backups"}],
            }
        ],
        "volumes": [{"name": "backups", "persistentVolumeClaim": {"claimName": claim(ctx)}}],
    }


def _job(ctx: Context, name: str, role: str, script: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": ctx.namespace,
            "labels": backup.labels(ctx, role),
            "ownerReferences": [ctx.owner_reference],
        },
        "spec": {"backoffLimit": 1, "template": {"spec": _pod(ctx, name, script)}},
    }


def dump_job(ctx: Context, name: str) -> dict[str, Any]:
    return _job(ctx, name, "backup", 'pg_dump --no-password | gzip > "/backups/$BACKUP.sql.gz"')


def cleanup_job(ctx: Context, gone: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    files = " ".join(f'"/backups/{r["name"]}.sql.gz"' for r in gone)
    name = bounded(f"{ctx.name}-prune", str(gone[-1]["name"])[-12:])
    job = _job(ctx, name, "prune", f"rm -f {files}")
    job["spec"]["ttlSecondsAfterFinished"] = 600  # nothing to keep once the files are gone
    return job


async def _backup(ctx: Context, name: str) -> None:
    size = str((ctx.spec.get("backup") or {}).get("storage") or "1Gi")
    await backup.ensure_claim(ctx, claim(ctx), size)
    await backup.take(ctx, name, dump_job(ctx, name), f"pvc://{claim(ctx)}/{name}.sql.gz")


@hooks.validate()
async def check_backup_policy(ctx: Context) -> None:
    retention(ctx.spec)


@hooks.schedule("backup", cron="spec.backup.schedule")
async def scheduled_backup(ctx: Context) -> None:
    await _backup(ctx, ctx.run)
    await backup.prune(ctx, retention(ctx.spec), lambda gone: cleanup_job(ctx, gone))


@hooks.action("backup-now")
async def backup_now(ctx: Context) -> None:
    await _backup(ctx, ctx.run)
    await backup.prune(ctx, retention(ctx.spec), lambda gone: cleanup_job(ctx, gone))


@hooks.before("uninstall", timeout=1800)
async def final_backup(ctx: Context) -> None:
    if ctx.annotations.get(SKIP_FINAL_BACKUP) == "true":
        await ctx.event("FinalBackupSkipped", f"{SKIP_FINAL_BACKUP}=true: no final backup")
        return
    await _backup(ctx, bounded(f"{ctx.name}-final", ctx.uid[:8] or "0"))
