"""Actions on request: ``helm-operator.io/action: <verb>[=<argument>]`` runs its hook once.

The request is acknowledged in ``status.day2.lastAction`` (written before the hook runs, so a
restart resumes the same run) and the annotation is removed afterwards, unless a new request
replaced it meanwhile; ``lastAction.acknowledged`` then says it was removed, so the same request
made again (``verify-backup`` next week) is a new one, while one whose removal a restart cut
short is not run twice. A request for an action whose ``uses=`` field is invalid waits, and ``Day2``
says why.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from helm_operator.adapters.metrics import DAY2_RUNS
from helm_operator.config.watches import Watch
from helm_operator.core.conditions import Contribution, Owner, StatusPatch, fields_patch
from helm_operator.core.naming import ACTION_ANNOTATION
from helm_operator.core.vocabulary import Event, Reason
from helm_operator.hooks._engines.services import NOW, EngineServices
from helm_operator.hooks._engines.specs import governs
from helm_operator.hooks._engines.tasks import Tasks
from helm_operator.hooks._runner import HookResult, run
from helm_operator.hooks.schedule import bounded, rfc3339
from helm_operator.release.identity import ReleaseId

SOURCE = "action"  # how the health names the actions' part of Day2


def parse_action(value: str) -> tuple[str, str]:
    verb, _, argument = value.strip().partition("=")
    return verb.strip(), argument.strip()


@dataclass
class Actions:
    shared: EngineServices
    tasks: Tasks

    def request(
        self, watch: Watch, body: Mapping[str, Any], ident: ReleaseId, invalid: Sequence[str]
    ) -> None:
        """Start the requested action, or — if a field it uses is invalid — say on Day2 why it
        waits (it runs once the spec is fixed). A withdrawn request no longer waits."""
        meta = body["metadata"]
        health, owner = self.shared.health, ident.owner
        request = str((meta.get("annotations") or {}).get(ACTION_ANNOTATION) or "")
        if not request:
            if any(p.source == SOURCE and p.reason == Reason.ACTION_HELD for p in health.failing(owner)):
                health.report(owner, SOURCE, None)
            return
        verb, _ = parse_action(request)
        hook = self.shared.of(watch).action_for(verb)
        if hook is not None and governs(hook, invalid):
            why = "; ".join(p.message for p in health.failing(owner) if p.reason == Reason.INVALID_SPEC)
            health.report(owner, SOURCE, (Reason.ACTION_HELD, f"action {request} waits: {why}"))
            return
        step = functools.partial(self._act, watch, meta.get("namespace"), meta["name"])
        self.tasks.start(ident, "action", step)

    async def _act(self, watch: Watch, namespace: str | None, name: str) -> float | None:
        """Run the requested action once (under the lock); acknowledge it in status, then remove
        the annotation. Seconds until the next look, or None: done."""
        shared = self.shared
        body = await shared.fresh(watch, namespace, name)
        if body is None:
            return None
        request = str((body["metadata"].get("annotations") or {}).get(ACTION_ANNOTATION) or "")
        if not request:
            return None
        ref = shared.ref(watch, body)
        last = dict(((body.get("status") or {}).get("day2") or {}).get("lastAction") or {})
        finished = last.get("phase") in ("Succeeded", "Failed")
        if last.get("request") == request and finished and not last.get("acknowledged"):
            return await self._acknowledge(watch, body, request)  # done; its removal was cut short
        verb, argument = parse_action(request)
        hooks = shared.of(watch)
        hook = hooks.action_for(verb)
        if last.get("request") == request and last.get("phase") == "Running":
            run_as = str(last.get("name"))
        else:
            # A verb the module does not declare runs nothing: no run name, no Running phase.
            run_as = bounded(f"{name}-{verb}", NOW().strftime("%Y%m%d%H%M%S")) if hook is not None else ""
            last = {
                "request": request,
                "name": run_as or None,  # merge patch: an earlier request's run name goes
                "phase": "Running",
                "startTime": rfc3339(NOW()),
                "acknowledged": None,  # merge patch: the previous request's flag goes
            }
            if hook is not None:
                await shared.reporter.status(ref, watch.served_plural, _last_action(last))
        if hook is None:
            known = ", ".join(sorted(h.verb for h in hooks.actions)) or "none"
            result = HookResult(
                False, Reason.UNKNOWN_ACTION, f"unknown action {verb!r}; {watch.kind} supports: {known}"
            )
        else:
            await shared.reporter.events(
                ref, [Event.normal(Reason.ACTION_STARTED, f"{request}: run {run_as}")]
            )
            release = await shared.release(watch, body)
            result = await run(
                hook, shared.context(watch, body, release=release, run_as=run_as, argument=argument)
            )
            if result.waiting:
                return result.retry_after
        phase = "Succeeded" if result.ok else "Failed"
        known_verb = hook.verb if hook is not None else "unknown"  # a label never takes user input
        DAY2_RUNS.labels(watch=watch.key, hook=f"action/{known_verb}", result=phase).inc()
        last.update(
            phase=phase,
            completionTime=rfc3339(NOW()),
            message=result.message or f"{request} done",
        )
        await shared.reporter.status(ref, watch.served_plural, _last_action(last))
        if result.ok:
            await shared.reporter.events(
                ref, [Event.normal(Reason.ACTION_SUCCEEDED, f"{request}: run {run_as} succeeded")]
            )
        await shared.record(watch, body, SOURCE, result)
        return await self._acknowledge(watch, body, request)

    async def _acknowledge(self, watch: Watch, body: Mapping[str, Any], request: str) -> float | None:
        """Remove the handled request, unless a new one replaced it meanwhile (then: handle that)."""
        meta = body["metadata"]
        fresh = await self.shared.fresh(watch, meta.get("namespace"), meta["name"])
        if fresh is None:
            return None
        if (fresh["metadata"].get("annotations") or {}).get(ACTION_ANNOTATION) != request:
            return 0.0
        patch = {
            "metadata": {
                "resourceVersion": fresh["metadata"]["resourceVersion"],
                "annotations": {ACTION_ANNOTATION: None},
            }
        }
        try:
            await self.shared.client.patch(
                watch.api_version, watch.kind, meta["name"], meta.get("namespace"), patch
            )
        except ApiException as exc:
            if exc.status == 409:  # changed in between: look again
                return 0.0
            raise
        done = _last_action({"acknowledged": True})
        await self.shared.reporter.status(self.shared.ref(watch, fresh), watch.served_plural, done)
        return None


def _last_action(last: Mapping[str, Any]) -> StatusPatch:
    """The patch of ``status.day2.lastAction``, the part of the status this engine owns."""
    return fields_patch(Contribution(Owner.ACTIONS, fields={"day2": {"lastAction": dict(last)}}))
