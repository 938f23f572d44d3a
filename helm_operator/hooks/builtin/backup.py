"""Backups as Kubernetes Jobs, recorded in ``status.day2.backups``, with retention.

A hook module builds the Job that writes one backup (``pg_dump``, ``etcdctl snapshot save`` …);
these helpers create it under the run's deterministic name (a rerun after a restart adopts the
Job instead of starting another), wait for it, record the result, and prune by the policy.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from helm_operator.core.naming import DAY2_LABEL
from helm_operator.hooks.builtin.retention import Retention, to_prune
from helm_operator.hooks.context import Context
from helm_operator.hooks.errors import PermanentError
from helm_operator.hooks.schedule import rfc3339

RECORDS = "backups"  # the status.day2 key
POLL = 2.0  # seconds between looks at a running Job


def job_phase(job: Mapping[str, Any] | None) -> str:
    """Running | Succeeded | Failed (from the Job's conditions)."""
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    for c in conditions:
        if c.get("status") == "True" and c.get("type") == "Complete":
            return "Succeeded"
        if c.get("status") == "True" and c.get("type") == "Failed":
            return "Failed"
    return "Running"


def _why_failed(job: Mapping[str, Any]) -> str:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Failed" and c.get("status") == "True":
            return f"{c.get('reason') or 'Failed'}: {c.get('message') or ''}".strip(": ")
    return "the Job failed"


def labels(ctx: Context, role: str) -> dict[str, str]:
    """Labels of the objects the helpers create: whose, and what for."""
    return {DAY2_LABEL: ctx.owner, "helm-operator.io/day2-role": role}


async def run_job(ctx: Context, job: Mapping[str, Any], poll: float = POLL) -> dict[str, Any]:
    """Create the Job (or adopt the one of that name) and wait until it succeeds or fails."""
    meta = job["metadata"]
    current = await ctx.kube.create(job)
    while job_phase(current) == "Running":
        await asyncio.sleep(poll)
        found = await ctx.kube.get("batch/v1", "Job", meta["name"], meta.get("namespace"))
        if found is None:
            raise PermanentError(f"Job {meta['name']} was deleted before it finished")
        current = found
    return current


def records(ctx: Context) -> list[dict[str, Any]]:
    found = ctx.day2.get(RECORDS) or []
    return [dict(r) for r in found]


async def _record(ctx: Context, record: Mapping[str, Any]) -> None:
    kept = [r for r in records(ctx) if r.get("name") != record["name"]]
    ctx.day2[RECORDS] = sorted(
        [*kept, dict(record)], key=lambda r: (str(r.get("startTime") or ""), str(r["name"]))
    )
    await ctx.day2.save()


async def take(ctx: Context, name: str, job: Mapping[str, Any], location: str) -> dict[str, Any]:
    """Run one backup Job and record it (name, start, end, phase, location, error). A failed
    backup raises ``PermanentError`` after it is recorded."""
    existing = next((r for r in records(ctx) if r.get("name") == name), None)
    now = rfc3339(dt.datetime.now(dt.UTC))
    record: dict[str, Any] = dict(existing or {"name": name, "startTime": now, "location": location})
    record.update(phase="Running", job=job["metadata"]["name"])
    await _record(ctx, record)
    await ctx.event("BackupStarted", f"backup {name} started (Job {job['metadata']['name']})")
    finished = await run_job(ctx, job)
    phase = job_phase(finished)
    record.update(phase=phase, completionTime=rfc3339(dt.datetime.now(dt.UTC)))
    if phase == "Failed":
        record["error"] = _why_failed(finished)
        await _record(ctx, record)
        await ctx.event("BackupFailed", f"backup {name} failed: {record['error']}", warning=True)
        raise PermanentError(f"backup {name} failed: {record['error']}")
    record.pop("error", None)
    await _record(ctx, record)
    await ctx.event("BackupSucceeded", f"backup {name} written to {location}")
    return record


async def prune(
    ctx: Context,
    policy: Retention,
    cleanup: Callable[[Sequence[Mapping[str, Any]]], Mapping[str, Any] | None] | None = None,
    now: dt.datetime | None = None,
) -> list[str]:
    """Delete the backups the policy no longer keeps: their Jobs and records, and (through the Job
    ``cleanup`` builds, if any) the files the operator wrote for them."""
    everything = records(ctx)
    names = to_prune(everything, policy, now or dt.datetime.now(dt.UTC))
    if not names:
        return []
    gone = [r for r in everything if r.get("name") in names]
    for r in gone:
        await ctx.kube.delete("batch/v1", "Job", str(r.get("job") or r["name"]), ctx.namespace)
    ctx.day2[RECORDS] = [r for r in everything if r.get("name") not in names]
    await ctx.day2.save()
    job = cleanup(gone) if cleanup is not None else None
    if job is not None:
        await ctx.kube.create(job)
    await ctx.event("BackupsPruned", f"pruned {len(names)} backup(s) past retention: {', '.join(names)}")
    return names


async def ensure_claim(ctx: Context, name: str, size: str, storage_class: str | None = None) -> None:
    """The PersistentVolumeClaim backups are written to. Not owned by the resource: the backups
    (the final one included) outlive it, and are removed only on purpose."""
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    await ctx.kube.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": ctx.namespace, "labels": labels(ctx, "backup-storage")},
            "spec": spec,
        }
    )
