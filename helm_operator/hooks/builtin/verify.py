"""Backup verification: the newest backup restored into a throw-away instance, checked, torn down.

A backup that was never restored is a hope, not a backup. :func:`verify_latest` takes the newest
successful backup in ``status.day2.backups`` and runs the Job a hook module builds for it (see
:func:`instance`): it restores the backup into the Pod's own scratch volume, starts the database
there with the members' image, where the chart places the members, and runs the hook author's
check (a query answers, a key is read). Nothing of the release is touched, and the Job is deleted
whatever happens (its Pod too, waited for), also when the check fails or the hook is cancelled.

The outcome is ``status.day2.lastVerifiedBackup`` — ``{name, location, time, restoreSeconds,
result, message}``, ``restoreSeconds`` being the measured time from the instance's creation until
its check answered (scheduling and image pull included: what a real restore would take) — an Event
(``BackupVerified``, or a Warning ``BackupVerificationFailed``) and the metrics
``helm_operator_backup_last_verified_timestamp_seconds``, ``helm_operator_restore_duration_seconds``
and ``helm_operator_backup_verifications_total``. A failed verification raises ``PermanentError``
naming the backup with the reason ``BackupVerificationFailed``, so ``Day2`` is False and says which
backup did not restore. When the check itself refused the backup (a container exited 1 to 127
saying why, not an instance killed or never run), the backup's own record in
``status.day2.backups`` becomes ``Failed`` with the reason, so no restore takes it. A backup Job
that said what it wrote (``holds`` in its record) lets the check compare the restored data with
that, not only ask whether something restored.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from helm_operator.adapters import metrics
from helm_operator.core.vocabulary import Reason
from helm_operator.hooks.builtin import backup
from helm_operator.hooks.builtin.jobs import Container, ScriptError, check, shell_text
from helm_operator.hooks.context import Context
from helm_operator.hooks.errors import PermanentError
from helm_operator.hooks.schedule import bounded, parse_time, rfc3339

LAST = "lastVerifiedBackup"  # the status.day2 key
ROLE = "verify"  # the Job's helm-operator.io/day2-role
SCRATCH = "scratch"  # the instance's own volume (an emptyDir): where the backup is restored
POLL = 1.0  # seconds between looks at the running instance
DEADLINE = 1800  # seconds the instance may take before Kubernetes stops it
TEARDOWN = 120.0  # seconds to wait for the instance's Pods to be gone
MESSAGE_MAX = 300  # characters of a container's termination message kept in the status

Result = Literal["Succeeded", "Failed"]
Builder = Callable[[str, Mapping[str, Any]], Mapping[str, Any]]  # (Job name, backup record) -> Job


# --- pure: which backup, what happened ------------------------------------------------------------


def latest(records: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The newest successful backup (by completion, then start time, then name), or None."""
    done = [r for r in records if r.get("phase") == "Succeeded" and r.get("location")]
    if not done:
        return None
    return max(
        done,
        key=lambda r: (str(r.get("completionTime") or ""), str(r.get("startTime") or ""), str(r["name"])),
    )


@dataclass(frozen=True)
class Verified:
    """One verification's outcome, as ``status.day2.lastVerifiedBackup`` says it."""

    backup: str
    location: str
    time: dt.datetime  # when the check answered (or the instance failed)
    restore_seconds: float
    result: Result
    message: str
    blames_the_backup: bool = False  # the check itself found the backup wanting (not the instance)

    @property
    def ok(self) -> bool:
        return self.result == "Succeeded"

    def to_status(self) -> dict[str, Any]:
        return {
            "name": self.backup,
            "location": self.location,
            "time": rfc3339(self.time),
            "restoreSeconds": round(self.restore_seconds, 1),
            "result": self.result,
            "message": self.message,
        }


def why_failed(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> str:
    """What stopped the instance: the containers that exited non-zero (with the last line of
    their termination message), else the Job's own reason (e.g. its deadline passed)."""
    said = []
    for pod in pods:
        status = pod.get("status") or {}
        for c in [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]:
            done = (c.get("state") or {}).get("terminated") or (c.get("lastState") or {}).get("terminated")
            if not done or done.get("exitCode") in (0, None):
                continue
            lines = [x for x in str(done.get("message") or "").splitlines() if x.strip()]
            tail = f": {lines[-1].strip()[-MESSAGE_MAX:]}" if lines else ""
            said.append(f"{c.get('name')} exited {done.get('exitCode')}{tail}")
    if said:
        return "; ".join(dict.fromkeys(said))
    for c in (job.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Failed" and c.get("status") == "True":
            return f"{c.get('reason') or 'Failed'}: {c.get('message') or 'the instance failed'}".strip(": ")
    return "the instance failed"


def check_refused(pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a container of the instance ended the check itself: it exited 1 to 127 and said
    why. A container killed (128 and up: out of memory, a signal) or an instance that never ran
    (its deadline passed) says nothing of the backup."""
    for pod in pods:
        for c in (pod.get("status") or {}).get("containerStatuses") or ():
            done = (c.get("state") or {}).get("terminated") or (c.get("lastState") or {}).get("terminated")
            if done and 0 < int(done.get("exitCode") or 0) < 128 and str(done.get("message") or "").strip():
                return True
    return False


def outcome(
    record: Mapping[str, Any],
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    seconds: float,
    now: dt.datetime,
) -> Verified:
    """The verification's outcome from the finished instance's Job and Pods."""
    name, location = str(record["name"]), str(record.get("location") or "")
    if backup.job_phase(job) == "Succeeded":
        message = f"restored {location} into a throw-away instance; its check answered"
        return Verified(name, location, now, seconds, "Succeeded", message)
    return Verified(name, location, now, seconds, "Failed", why_failed(job, pods), check_refused(pods))


def watch_key(resource: Mapping[str, Any]) -> str:
    """The metrics' ``watch`` label of the resource's kind (``Kind.version.group``, as the watch
    is named everywhere else): bounded by the kinds, never a resource's name."""
    group, _, version = str(resource["apiVersion"]).rpartition("/")
    return f"{resource['kind']}.{version}.{group}"


def seconds_since(job: Mapping[str, Any], started: float, now: dt.datetime) -> float:
    """How long the instance has existed: measured here since its creation (``started``,
    monotonic), or — for one adopted after a restart — since its ``creationTimestamp``."""
    born = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    measured = time.monotonic() - started
    if born is not None and (now - born).total_seconds() > measured + 5:
        return (now - born).total_seconds()
    return measured


# --- the instance ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sidecar:
    """A container that serves while the checks run (the restored database): it starts after the
    restore, the checks start once ``ready`` (an argv, exec'd in it, no shell) succeeds, and it is
    stopped when they end."""

    container: Container
    ready: tuple[str, ...]
    ready_within: int = 120  # seconds it may take to become ready

    def manifest(self) -> dict[str, Any]:
        if shell_text(self.ready) is not None:
            raise ScriptError(f"{self.container.name}: its readiness probe runs a text as code")
        out = self.container.manifest()
        out["restartPolicy"] = "Always"
        out["startupProbe"] = {
            "exec": {"command": list(self.ready)},
            "periodSeconds": 1,
            "timeoutSeconds": 5,
            "failureThreshold": self.ready_within,
        }
        return out


def instance(
    ctx: Context,
    name: str,
    checks: Sequence[Container],
    *,
    restore: Sequence[Container] = (),
    serve: Sequence[Sidecar] = (),
    volumes: Sequence[Mapping[str, Any]] = (),
    pod: Mapping[str, Any] | None = None,
    logs_on_error: bool = False,
    deadline: int = DEADLINE,
) -> dict[str, Any]:
    """The throw-away instance: a Job whose Pod runs ``restore`` (init containers: the backup into
    the ``scratch`` volume), then ``serve`` (the database on it, as sidecars), then ``checks``.

    It is placed where the chart places its Pods (``backup.job``: the values' nodeSelector,
    tolerations and node affinity, unless ``pod`` sets them), never retried (a backup that did
    not restore will not on a second try), and stopped after ``deadline`` seconds. A container
    that fails says why in its termination message (``/dev/termination-log``; with
    ``logs_on_error`` its last log lines), which the status keeps."""
    job = backup.job(
        ctx,
        name,
        ROLE,
        checks,
        init=restore,
        volumes=[{"name": SCRATCH, "emptyDir": {}}, *volumes],
        pod=pod,
    )
    spec = job["spec"]["template"]["spec"]
    if serve:
        spec["initContainers"] = [*(spec.get("initContainers") or ()), *(s.manifest() for s in serve)]
    if logs_on_error:
        for c in [*(spec.get("initContainers") or ()), *spec["containers"]]:
            c["terminationMessagePolicy"] = "FallbackToLogsOnError"
    job["spec"].update(backoffLimit=0, activeDeadlineSeconds=deadline)
    return job


def job_name(ctx: Context) -> str:
    """The instance's name: the run's (deterministic, so a rerun after a restart adopts it)."""
    return ctx.run or bounded(f"{ctx.name}-verify", dt.datetime.now(dt.UTC).strftime("%Y%m%d%H%M%S"))


async def _pods(ctx: Context, name: str) -> list[dict[str, Any]]:
    return await ctx.kube.list("v1", "Pod", ctx.namespace, labels={"job-name": name})


async def teardown(ctx: Context, name: str, wait: float = TEARDOWN) -> None:
    """Delete the instance's Job and wait (``wait`` seconds at most) until its Pods are gone."""
    await ctx.kube.delete("batch/v1", "Job", name, ctx.namespace)
    until = time.monotonic() + wait
    while await _pods(ctx, name):
        if time.monotonic() > until:
            ctx.log.warning("the Pods of the throw-away instance %s are still there after %gs", name, wait)
            return
        await asyncio.sleep(POLL)


async def leftovers(ctx: Context, keep: str) -> list[str]:
    """Tear down the instances an interrupted verification left (not ``keep``)."""
    found = await ctx.kube.list("batch/v1", "Job", ctx.namespace, labels=backup.labels(ctx, ROLE))
    gone = [str(j["metadata"]["name"]) for j in found if j["metadata"]["name"] != keep]
    for name in gone:
        await teardown(ctx, name)
    return gone


# --- the built-in ---------------------------------------------------------------------------------


async def verify_latest(
    ctx: Context, build: Builder, *, require: bool = True, poll: float = POLL
) -> Verified | None:
    """Verify the newest successful backup: create the instance ``build(name, record)`` makes,
    wait for it, tear it down (always), and record the outcome (status, Event, metrics).

    No successful backup yet: ``require`` raises ``PermanentError`` (an action asked for it),
    otherwise this says so in an Event and returns None (a schedule that runs before the first
    backup). A failed verification raises ``PermanentError`` naming the backup."""
    record = latest(backup.records(ctx))
    if record is None:
        message = "no successful backup in status.day2.backups to verify"
        if require:
            raise PermanentError(message)
        await ctx.event("NothingToVerify", message)
        return None
    name = job_name(ctx)
    await leftovers(ctx, name)
    job = build(name, record)
    check(job)
    await ctx.event(
        "BackupVerificationStarted", f"verifying backup {record['name']}: restoring it into {name}"
    )
    started = time.monotonic()
    try:
        finished = await backup.run_job(ctx, job, poll)
        now = dt.datetime.now(dt.UTC)
        seconds = seconds_since(finished, started, now)
        pods = await _pods(ctx, name) if backup.job_phase(finished) == "Failed" else []
        verified = outcome(record, finished, pods, seconds, now)
    finally:
        await teardown(ctx, name)
    await _record(ctx, verified)
    return verified


async def _record(ctx: Context, verified: Verified) -> None:
    ctx.day2[LAST] = verified.to_status()
    await ctx.day2.save()
    watch = watch_key(ctx.resource)
    metrics.BACKUP_VERIFICATIONS.labels(watch=watch, result=verified.result).inc()
    metrics.RESTORE_DURATION.labels(watch=watch, result=verified.result).observe(verified.restore_seconds)
    took = f"{verified.restore_seconds:.1f}s"
    if verified.ok:
        metrics.BACKUP_LAST_VERIFIED.labels(watch=watch).set(verified.time.timestamp())
        await ctx.event(
            Reason.BACKUP_VERIFIED, f"backup {verified.backup} verified: {verified.message} ({took})"
        )
        return
    message = f"backup {verified.backup} failed verification: {verified.message}"
    if verified.blames_the_backup:
        await backup.fail(ctx, verified.backup, f"failed verification: {verified.message}")
    await ctx.event(Reason.BACKUP_VERIFICATION_FAILED, f"{message} (after {took})", warning=True)
    raise PermanentError(message, reason=Reason.BACKUP_VERIFICATION_FAILED)
