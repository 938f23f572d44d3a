"""kopf wiring: one set of handlers per Watch, concurrency limits, status and Events.

kopf gives us the watch streams, finalizers, retries and per-object serialisation; everything
the handlers decide comes from ``reconciler`` (framework-free) and ``status`` (pure).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import kopf

from helm_operator.reconciler import Result, Runtime, finalize, reconcile
from helm_operator.status import status_patch
from helm_operator.watches import Watch, selector_matches

log = logging.getLogger(__name__)

FINALIZER = "helm-operator.io/uninstall"


def configure(settings: kopf.OperatorSettings) -> None:
    """Operator-wide kopf settings: our own finalizer and annotation prefix, quiet Events."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="helm-operator.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="helm-operator.io",
        key="last-handled-configuration",
    )
    settings.posting.level = logging.WARNING  # our handlers post their own, precise Events
    settings.watching.server_timeout = 300
    settings.batching.error_delays = [1, 2, 5, 10, 30]


def _apply(
    result: Result, body: kopf.Body, status: Mapping[str, Any], patch: kopf.Patch, generation: int
) -> None:
    for etype, reason, message in result.events:
        kopf.event(body, type=etype, reason=reason, message=message)
    for key, value in status_patch(status, result.outcome, generation, time.time(), result.attempts).items():
        patch.status[key] = value


def register(watch: Watch, runtime: Runtime, registry: kopf.OperatorRegistry) -> None:
    """Register create/update/resume/resync/delete handlers for one watched kind."""
    slots = asyncio.Semaphore(watch.max_concurrent_reconciles)
    gvr: dict[str, Any] = dict(group=watch.group, version=watch.version, plural=watch.plural)
    labels = {k: v for k, v in (watch.selector.get("matchLabels") or {}).items()}
    filters: dict[str, Any] = {}
    if watch.selector:
        filters["when"] = lambda labels, **_: selector_matches(watch.selector, labels)
    key = watch.key

    async def on_change(
        body: kopf.Body, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta, patch: kopf.Patch, **_: Any
    ) -> None:
        async with slots:
            result = await reconcile(
                runtime, watch, meta.namespace, meta.name, dict(spec), dict(status), meta.uid
            )
        _apply(result, body, status, patch, int(meta.get("generation") or 0))
        if result.retry_after is not None and result.outcome.phase != "ready":
            raise kopf.TemporaryError(result.outcome.message[:200], delay=result.retry_after)

    async def on_delete(body: kopf.Body, meta: kopf.Meta, **_: Any) -> None:
        async with slots:
            try:
                message = await finalize(runtime, watch, meta.namespace, meta.name)
            except RuntimeError as exc:
                kopf.event(body, type="Warning", reason="UninstallFailed", message=str(exc))
                raise kopf.TemporaryError(str(exc), delay=10) from None
        kopf.event(body, type="Normal", reason="Uninstalled", message=message)

    common: dict[str, Any] = dict(registry=registry, labels=labels or None, **filters)
    kopf.on.resume(**gvr, id=f"{key}/resume", **common)(on_change)
    kopf.on.create(**gvr, id=f"{key}/create", **common)(on_change)
    kopf.on.update(**gvr, id=f"{key}/update", field="spec", **common)(on_change)
    kopf.timer(
        **gvr,
        id=f"{key}/resync",
        interval=watch.reconcile_period,
        initial_delay=watch.reconcile_period,
        **common,
    )(on_change)
    kopf.on.delete(**gvr, id=f"{key}/delete", **common)(on_delete)
