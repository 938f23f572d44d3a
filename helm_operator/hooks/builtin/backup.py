"""Backups and restores as Kubernetes Jobs, recorded in ``status.day2``, with retention.

A hook module builds the Job that writes one backup (``pg_dump``, ``etcdctl snapshot save`` …) or
restores one with :func:`job`, from :mod:`~helm_operator.hooks.builtin.jobs` containers (values
as env or args, never in a script's text; a Job that runs a shell on any other text is refused).
These helpers create it under a deterministic name (a rerun after a restart adopts the Job
instead of starting another), wait for it, record the result in ``status.day2.backups`` or
``status.day2.restore``, and prune by the policy.

What a hook module does with them is policy: :func:`take_and_prune` (a scheduled or requested
backup: its volume, the Job, its record, retention) and :func:`restore_before_install` (the
backup the spec names, restored once, before the release's workloads exist).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helm_operator.core.naming import DAY2_LABEL
from helm_operator.hooks.builtin.jobs import Container, check, command
from helm_operator.hooks.builtin.retention import Retention, to_prune
from helm_operator.hooks.context import Context, lookup
from helm_operator.hooks.errors import PermanentError, TemporaryError
from helm_operator.hooks.schedule import bounded, rfc3339

RECORDS = "backups"  # the status.day2 keys
RESTORE = "restore"
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


def placement(values: Mapping[str, Any]) -> dict[str, Any]:
    """Where the chart's Pods are placed, from its values: a Job that reads their volumes or reaches
    them must run on the same kind of node (a toleration, a selected pool). Pod affinity is not
    taken: it is about the chart's own Pods, which a Job is not."""
    out: dict[str, Any] = {}
    if isinstance(values.get("nodeSelector"), Mapping) and values["nodeSelector"]:
        out["nodeSelector"] = dict(values["nodeSelector"])
    tolerations = values.get("tolerations")
    if isinstance(tolerations, Sequence) and not isinstance(tolerations, str) and tolerations:
        out["tolerations"] = [dict(t) for t in tolerations if isinstance(t, Mapping)]
    affinity = values.get("affinity")
    if isinstance(affinity, Mapping) and isinstance(affinity.get("nodeAffinity"), Mapping):
        out["affinity"] = {"nodeAffinity": dict(affinity["nodeAffinity"])}
    return out


def job(
    ctx: Context,
    name: str,
    role: str,
    containers: Sequence[Container],
    *,
    init: Sequence[Container] = (),
    volumes: Sequence[Mapping[str, Any]] = (),
    pod: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A Job of the resource's day-2 work (backup, restore, prune): labelled with its owner and
    role, owned by the resource, one retry, its Pod never restarted in place.

    Its containers are :class:`~helm_operator.hooks.builtin.jobs.Container` values (built by
    ``jobs.command`` or ``jobs.shell``), so every value reaches them as data; ``pod`` holds other
    Pod spec fields (``securityContext`` …). It runs where the chart's Pods run: the release's
    ``nodeSelector``, ``tolerations`` and node affinity (the usual chart values) are its own unless
    ``pod`` sets them."""
    extra = dict(pod or {})
    taken = {"containers", "initContainers", "volumes"} & extra.keys()
    if taken:
        raise ValueError(f"Job {name}: give {', '.join(sorted(taken))} as arguments, not in pod")
    spec: dict[str, Any] = {"restartPolicy": "Never", **placement(ctx.values or ctx.spec), **extra}
    if init:
        spec["initContainers"] = [c.manifest() for c in init]
    spec["containers"] = [c.manifest() for c in containers]
    if volumes:
        spec["volumes"] = [dict(v) for v in volumes]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": ctx.namespace,
            "labels": labels(ctx, role),
            "ownerReferences": [ctx.owner_reference],
        },
        "spec": {"backoffLimit": 1, "template": {"spec": spec}},
    }


_SUFFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def prune_name(ctx: Context, gone: Sequence[Mapping[str, Any]]) -> str:
    """The name of the Job that removes the files of ``gone``: ``<resource>-prune-<the last one's
    slot>``, or a digest of the names when that is not a name part (records are data too)."""
    last = str(gone[-1]["name"])[-12:].strip("-")
    if not _SUFFIX.fullmatch(last):
        last = hashlib.sha256("\0".join(str(r["name"]) for r in gone).encode()).hexdigest()[:12]
    return bounded(f"{ctx.name}-prune", last)


async def run_job(ctx: Context, job: Mapping[str, Any], poll: float = POLL) -> dict[str, Any]:
    """Create the Job (or adopt the one of that name) and wait until it succeeds or fails."""
    check(job)
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


HOLDS_MAX = 300  # characters of a backup Job's termination message kept as what the backup holds


def holds(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """What a finished backup Job said it wrote (the last line of its containers' termination
    message, ``/dev/termination-log``): tables, rows, a checksum of its record of them — for a
    verification to compare the restored data with. None if it said nothing."""
    for pod in pods:
        for c in (pod.get("status") or {}).get("containerStatuses") or ():
            done = (c.get("state") or {}).get("terminated") or {}
            lines = [x.strip() for x in str(done.get("message") or "").splitlines() if x.strip()]
            if done.get("exitCode") == 0 and lines:
                return lines[-1][-HOLDS_MAX:]
    return None


async def fail(ctx: Context, name: str, error: str) -> None:
    """Mark a recorded backup Failed after the fact (a verification found that it does not restore
    what it held): a restore refuses it, the next verification takes the one before, and retention
    counts it with the failed ones."""
    record = next((r for r in records(ctx) if r.get("name") == name), None)
    if record is not None and record.get("phase") == "Succeeded":
        record.update(phase="Failed", error=error)
        await _record(ctx, record)


async def take(ctx: Context, name: str, job: Mapping[str, Any], location: str) -> dict[str, Any]:
    """Run one backup Job and record it (name, start, end, phase, location, error, and what it
    ``holds`` if its Job said so). A failed backup raises ``PermanentError`` after it is recorded."""
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
    pods = await ctx.kube.list("v1", "Pod", ctx.namespace, labels={"job-name": job["metadata"]["name"]})
    if (said := holds(pods)) is not None:
        record["holds"] = said
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
        check(job)
        await ctx.kube.create(job)
    await ctx.event("BackupsPruned", f"pruned {len(names)} backup(s) past retention: {', '.join(names)}")
    return names


async def ensure_claim(
    ctx: Context,
    name: str,
    size: str,
    storage_class: str | None = None,
    *,
    role: str = "backup-storage",
    access_modes: Sequence[str] = ("ReadWriteOnce",),
) -> None:
    """A PersistentVolumeClaim (kept if it exists): where backups are written, or a member's data
    volume a restore fills before its StatefulSet starts (same name as its claim template makes).
    Not owned by the resource: backups, the final one included, outlive it."""
    spec: dict[str, Any] = {"accessModes": list(access_modes), "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    await ctx.kube.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": ctx.namespace, "labels": labels(ctx, role)},
            "spec": spec,
        }
    )


async def find(ctx: Context, source: str, path: str = "spec.restore.fromBackup") -> dict[str, Any]:
    """The backup to restore: ``source`` is a location (``pvc://claim/file``, ``s3://bucket/key``)
    or the name of a successful backup recorded by a resource of the same kind in this namespace."""
    if "://" in source:
        return {"name": source.rstrip("/").rsplit("/", 1)[-1], "location": source}
    kind = str(ctx.resource["kind"])
    for other in await ctx.kube.list(str(ctx.resource["apiVersion"]), kind, ctx.namespace):
        day2 = (other.get("status") or {}).get("day2") or {}
        for record in day2.get(RECORDS) or ():
            if record.get("name") != source:
                continue
            if record.get("phase") != "Succeeded":
                raise PermanentError(f"{path}: backup {source} is {record.get('phase')}, not Succeeded")
            return {**record, "of": other["metadata"]["name"]}
    where = f" in namespace {ctx.namespace}" if ctx.namespace else ""
    raise PermanentError(
        f"{path}: no {kind}{where} records a backup named {source!r} "
        "(give its location, e.g. pvc://<claim>/<file>, if its resource is gone)"
    )


def restored(ctx: Context, source: str) -> bool:
    """Whether this resource has already been restored from ``source`` (a reinstall never
    restores again)."""
    state = ctx.day2.get(RESTORE) or {}
    return bool(state.get("phase") == "Succeeded" and source in (state.get("from"), state.get("location")))


async def restore(
    ctx: Context, source: Mapping[str, Any], job: Mapping[str, Any], poll: float = POLL
) -> None:
    """Run the restore Job once, with drift correction paused, and record it in
    ``status.day2.restore``. While it runs this raises ``TemporaryError`` (a ``before install``
    hook so holds the install back without holding a worker); a failed restore is permanent."""
    check(job)
    name = job["metadata"]["name"]
    state = dict(ctx.day2.get(RESTORE) or {})
    if state.get("job") == name and state.get("phase") == "Succeeded":
        return
    if state.get("job") != name:
        state = {
            "from": source["name"],
            "location": source["location"],
            "job": name,
            "phase": "Running",
            "startTime": rfc3339(dt.datetime.now(dt.UTC)),
        }
        ctx.day2[RESTORE] = state
        ctx.pause_drift(f"restoring from {source['location']}")
        await ctx.day2.save()
        await ctx.event("RestoreStarted", f"restoring {source['location']} (Job {name})")
    current = await ctx.kube.create(job)
    phase = job_phase(current)
    if phase == "Running":
        raise TemporaryError(f"restoring {source['location']}: Job {name} is running", delay=poll)
    state.update(phase=phase, completionTime=rfc3339(dt.datetime.now(dt.UTC)))
    ctx.resume_drift()
    if phase == "Failed":
        state["error"] = _why_failed(current)
        ctx.day2[RESTORE] = state
        message = f"restore from {source['location']} failed: {state['error']}"
        await ctx.event("RestoreFailed", message, warning=True)
        raise PermanentError(message)
    ctx.day2[RESTORE] = state
    await ctx.event("RestoreSucceeded", f"restored {source['location']} (Job {name})")


# --- the high-level built-ins: what a backup or restore hook does, the Jobs given -----------------

Cleanup = Callable[[Sequence[Mapping[str, Any]]], Mapping[str, Any] | None]  # records pruned -> Job


@dataclass(frozen=True)
class Claim:
    """A PersistentVolumeClaim made (kept if it exists) before a backup or restore Job needs it."""

    name: str
    size: str
    storage_class: str | None = None
    role: str = "backup-storage"
    access_modes: tuple[str, ...] = ("ReadWriteOnce",)

    async def ensure(self, ctx: Context) -> None:
        await ensure_claim(
            ctx, self.name, self.size, self.storage_class, role=self.role, access_modes=self.access_modes
        )


def remove_files(ctx: Context, gone: Sequence[Mapping[str, Any]], image: str) -> dict[str, Any] | None:
    """A ``cleanup`` for :func:`prune`: the Job that removes the files of the pruned backups kept
    on a volume (``pvc://<claim>/<file>``; each claim mounted), with ``rm`` from ``image``; None
    if none is. The paths are its arguments: data, never a script."""
    files: dict[str, list[str]] = {}
    for record in gone:
        scheme, _, rest = str(record.get("location") or "").partition("://")
        claim, _, file = rest.partition("/")
        if scheme == "pvc" and claim and file:
            files.setdefault(claim, []).append(file)
    if not files:
        return None
    volumes = {("backups" if i == 0 else f"backups-{i}"): claim for i, claim in enumerate(files)}
    paths = [f"/{volume}/{file}" for volume, claim in volumes.items() for file in files[claim]]
    rm = command("prune", image, ["rm", "-f", "--", *paths], mounts={v: f"/{v}" for v in volumes})
    claims = [{"name": v, "persistentVolumeClaim": {"claimName": c}} for v, c in volumes.items()]
    pruning = job(ctx, prune_name(ctx, gone), "prune", [rm], volumes=claims)
    pruning["spec"]["ttlSecondsAfterFinished"] = 600  # nothing to keep once the files are gone
    return pruning


async def take_and_prune(
    ctx: Context,
    name: str,
    job: Mapping[str, Any],
    location: str,
    *,
    claim: Claim | None = None,
    keep: Retention | None = None,
    cleanup: Cleanup | None = None,
) -> dict[str, Any]:
    """One backup: the volume it is written to (``claim``), the Job, its record in
    ``status.day2.backups``; then, only once it succeeded, the records (and through ``cleanup``
    the files) that ``keep`` no longer keeps. ``keep=None``: nothing is pruned (a final backup)."""
    if claim is not None:
        await claim.ensure(ctx)
    record = await take(ctx, name, job, location)
    if keep is not None:
        await prune(ctx, keep, cleanup)
    return record


def _restorable(location: str, schemes: Sequence[str]) -> bool:
    scheme, sep, rest = location.partition("://")
    where, slash, what = rest.partition("/")
    return bool(sep and scheme in schemes and where and slash and what)


async def restore_before_install(
    ctx: Context,
    job: Callable[[str, str], Mapping[str, Any]],
    *,
    claims: Callable[[], Sequence[Claim]] = tuple,
    schemes: Sequence[str] = ("pvc",),
    path: str = "spec.restore.fromBackup",
) -> None:
    """A ``before install`` hook's restore: the backup named at ``path`` (a location, or a backup
    another resource of the kind recorded) into volumes made first (``claims``: those the
    StatefulSet's claim templates will adopt), by the Job ``job(name, location)`` builds. Once
    per resource: a reinstall, or a source already restored, does nothing."""
    source = str(lookup(ctx.resource, path) or "").strip()
    if not source or restored(ctx, source):
        return
    volumes = claims()
    found = await find(ctx, source, path)
    location = str(found["location"])
    if not _restorable(location, schemes):
        expected = " or ".join(f"{s}://<{'claim' if s == 'pvc' else 'bucket'}>/<file>" for s in schemes)
        raise PermanentError(f"{path}: cannot restore from {location}: expected {expected}")
    for claim in volumes:
        await claim.ensure(ctx)
    digest = hashlib.sha256(location.encode()).hexdigest()[:6]
    name = bounded(f"{ctx.name}-restore", f"{ctx.uid[:8] or '0'}-{digest}")
    await restore(ctx, found, job(name, location))
