"""Resyncs decided from memory: when nothing a reconcile relied on has changed, a periodic resync
has nothing to do, and finds that out without an API request or a ``helm`` process.

What it relied on: the resource's uid, generation and status (as the handler wrote it), the
chart, the release's storage fingerprint (``ReleaseIndex``) and a drift check that found nothing
with the dependent watches running since (``DriftChecker.quiet``). Once in ``FULL_READ_EVERY``
a resync reads everything anyway, so a watch that silently stopped delivering costs at most that.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

from helm_operator.core.naming import CHART_VERSION_ANNOTATION
from helm_operator.runtime.desired import Resource, chart_for
from helm_operator.runtime.services import Runtime, Settled

__all__ = ["FULL_READ_EVERY", "Settled", "status_digest", "unchanged", "written"]

FULL_READ_EVERY = 600.0  # seconds a memory decision may rest on the watches alone


def status_digest(status: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(status, sort_keys=True, default=str).encode()).hexdigest()


def written(status: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """The status after a JSON merge patch (RFC 7386: maps merge, ``None`` deletes, the rest
    replaces), as the API server applies it."""
    merged = dict(status)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = written(merged[key], value)
        else:
            merged[key] = value
    return merged


async def unchanged(rt: Runtime, cr: Resource, status: str) -> bool:
    """Whether a resync of ``cr`` would find nothing to do, decided from memory alone (``status``:
    the digest of its status as last written). Watches with day-2 hooks never settle (a value
    translator may read anything)."""
    settled = rt.settled.get(cr.ident.key)
    if settled is None or rt.releases is None:
        return False
    if (settled.uid, settled.generation) != (cr.uid, cr.generation):
        return False
    if time.monotonic() - settled.since > FULL_READ_EVERY or status != settled.status:
        return False
    try:  # the version the resource pins, as its reconcile chose it
        pinned = chart_for(cr.watch, cr.annotations.get(CHART_VERSION_ANNOTATION))
        chart = rt.chart(await rt.local_chart(cr.watch, pinned))
    except Exception:
        return False
    ident = cr.ident
    return (
        chart is settled.chart
        and rt.releases.fingerprint(ident.namespace, ident.name) == settled.storage
        and rt.drift.quiet(cr.watch, ident.owner, cr.annotations)
    )
