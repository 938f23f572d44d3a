"""What is checked against the API server before the operator handles anything: each watch's kind is
served (its plural and scope learnt from discovery), a converted kind's versions all convert, a kind
of several schemas has converters, rollout policies have their CRD and run outside a ring.

Each refusal is a ``WatchesError`` naming the watches file's entry and field (exit 2), raised
before a single resource is touched.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from helm_operator.adapters.discovery import Discovery
from helm_operator.adapters.kube import Kube
from helm_operator.config.sharding import Ring, Shard
from helm_operator.config.watches import Watch, WatchesError, in_ring, resolve, sharded
from helm_operator.hooks import conversion
from helm_operator.runtime import rollouts
from helm_operator.runtime.webhook import ConversionWebhook

log = logging.getLogger(__name__)

CRD_WAIT_LOG_EVERY = 5.0


def resolve_watches(
    discovery: Discovery, watches: Sequence[Watch], shard: Shard, ring: Ring | None
) -> list[Watch]:
    """Each watch with its plural and scope from API discovery; waits for missing CRDs, saying
    which every few seconds. Raises WatchesError when the file contradicts the server."""
    resolved: list[Watch] = []
    last_log = 0.0
    pending = list(watches)
    while pending:
        discovery.refresh()
        waiting = []
        for w in pending:
            served = discovery.find(w.group, w.version, w.kind)
            if served is None:
                waiting.append(w)
            else:
                found = resolve(w, served.plural, served.namespaced)
                resolved.append(in_ring(sharded(found, shard), ring))
        pending = waiting
        if pending:
            if time.monotonic() - last_log >= CRD_WAIT_LOG_EVERY:
                names = ", ".join(f"{w.kind} ({w.api_version})" for w in pending)
                log.warning("waiting for the API server to serve %s: is its CRD applied?", names)
                last_log = time.monotonic()
            time.sleep(1.0)
    return [next(r for r in resolved if r.key == w.key) for w in watches]


def refuse_rollouts_in_a_ring(watches: Sequence[Watch], ring: Ring | None) -> None:
    """One driver per fleet: not a ring's every replica (refused before any Lease is taken)."""
    staged = [w for w in watches if w.rollout is not None]
    if staged and ring is not None:
        raise WatchesError(
            staged[0].source,
            "a rollout policy is not supported with --controller-ring yet (every replica would "
            "drive the same rollout); use static shards or one replica",
            fieldname="rollout",
        )


def check_rollouts(kube: Kube, watches: Sequence[Watch]) -> None:
    """Rollout policies need their CRD."""
    staged = [w for w in watches if w.rollout is not None]
    if not staged:
        return
    missing = rollouts.missing_crd(kube)
    if missing:
        raise WatchesError(staged[0].source, missing, fieldname="rollout")


def check_conversions(
    api: client.ApiClient, webhook: ConversionWebhook | None, watches: Sequence[Watch]
) -> None:
    """Each converted kind's served versions all have a way between them (else exit 2, naming
    the pairs); its CRD then converts through the webhook. A kind whose CRD serves versions of
    different schemas without any converter is refused too (its objects would be read with
    their fields pruned and their releases upgraded from what is left)."""
    _refuse_unconverted(api, webhook, watches)
    if webhook is None:
        return
    for w in watches:
        kind = webhook.kinds.get((w.group, w.kind))
        if kind is None:
            continue
        crd = f"{w.served_plural}.{w.group}"
        served, _ = webhook.served_versions(crd)
        gaps = conversion.missing(kind, served)
        if gaps:
            pairs = ", ".join(f"{a} -> {b}" for a, b in gaps)
            raise WatchesError(
                w.source,
                f"CRD {crd} serves {', '.join(served)} but no converter goes {pairs} "
                f"(declare @hooks.convert for each, or both ways through {w.version})",
                fieldname="hooks",
            )
        if len(served) > 1:
            webhook.inject(crd)
    if webhook.crds:
        threading.Thread(target=webhook.watch_reachability, name="conversion-check", daemon=True).start()


def _refuse_unconverted(
    api: client.ApiClient, webhook: ConversionWebhook | None, watches: Sequence[Watch]
) -> None:
    kinds = webhook.kinds if webhook is not None else {}
    apiext = client.ApiextensionsV1Api(api)
    for w in watches:
        if (w.group, w.kind) in kinds:
            continue
        crd = f"{w.served_plural}.{w.group}"
        try:
            found = api.sanitize_for_serialization(apiext.read_custom_resource_definition(crd))
        except ApiException as exc:
            if exc.status != 404:  # a missing CRD is reported where the watch starts
                log.warning("could not read CRD %s to check its versions: %s", crd, exc.reason)
            continue
        spec = found.get("spec") or {}
        if (spec.get("conversion") or {}).get("strategy", "None") != "None":
            continue  # converted by a webhook of its own
        versions = conversion.differing(spec.get("versions") or [])
        if versions:
            raise WatchesError(
                w.source,
                f"CRD {crd} serves {', '.join(versions)} with different schemas and no converter: "
                f"declare @hooks.convert both ways between {w.version} and each other version in "
                "a hook module (the watch's hooks: field), or serve one version",
                fieldname="hooks",
            )
