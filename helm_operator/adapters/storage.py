"""Read (and unlock) Helm's release storage straight from the API, without a ``helm`` process.

Helm keeps each revision in a Secret ``sh.helm.release.v1.<name>.v<revision>`` labelled
``owner=helm``, ``name``, ``status``, ``version`` plus the release's own labels. The labels alone
tell state and digest; the body (base64 + gzip + JSON) is decoded only when chart metadata or
the manifest are needed. Functions here are synchronous (call them through
``asyncio.to_thread``), except ``read``: the one way the operator reads a stored release.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
from collections import OrderedDict
from typing import Any

from kubernetes import client

from helm_operator.adapters.release_index import ReleaseIndex
from helm_operator.core.naming import FLEET_LABEL
from helm_operator.release.identity import ReleaseId
from helm_operator.release.record import (
    PENDING_STATUSES,
    TEST_EVENTS,
    UNLOCKED_PREFIX,
    StoredRelease,
    from_body,
)

_GZIP_MAGIC = b"\x1f\x8b\x08"


def decode_release(data: str) -> dict[str, Any]:
    """Decode the ``release`` key of a storage Secret as the API returns it."""
    raw = base64.b64decode(base64.b64decode(data))
    if raw[:3] == _GZIP_MAGIC:
        raw = gzip.decompress(raw)
    body: dict[str, Any] = json.loads(raw)
    return body


def encode_release(body: dict[str, Any]) -> str:
    return base64.b64encode(base64.b64encode(gzip.compress(json.dumps(body).encode()))).decode()


def _secrets(api: client.CoreV1Api, name: str, namespace: str) -> list[Any]:
    items = api.list_namespaced_secret(namespace, label_selector=f"owner=helm,name={name}").items
    return sorted(items, key=lambda s: int(s.metadata.labels.get("version", "0")))


_DECODED: OrderedDict[tuple[str, str, str], dict[str, Any]] = OrderedDict()
_DECODED_MAX = 256


def _decoded(namespace: str, secret: Any) -> dict[str, Any]:
    """What a record needs of a release Secret's body, decoded once per resourceVersion (a drift
    check reads the latest revision every time; decoding its chart and manifest dominated the
    check). The chart's files, templates and values are not kept: they were most of the memory."""
    key = (namespace, str(secret.metadata.name), str(getattr(secret.metadata, "resource_version", "")))
    if key[2] and key in _DECODED:
        _DECODED.move_to_end(key)
        return _DECODED[key]
    full = decode_release(secret.data["release"])
    body = {
        "chart": {"metadata": (full.get("chart") or {}).get("metadata") or {}},
        "info": {"description": (full.get("info") or {}).get("description", "")},
        "manifest": full.get("manifest"),
        "apply_method": full.get("apply_method"),
        # How each test hook last ran (a release read back from storage must still say whether it
        # passed its tests: a gated change is not finished before they pass).
        "hooks": [
            {"events": h.get("events") or [], "last_run": {"phase": (h.get("last_run") or {}).get("phase")}}
            for h in full.get("hooks") or []
            if isinstance(h, dict) and TEST_EVENTS & set(h.get("events") or [])
        ],
    }
    if key[2]:
        _DECODED[key] = body
        while len(_DECODED) > _DECODED_MAX:
            _DECODED.popitem(last=False)
    return body


def latest_release(
    api: client.CoreV1Api, name: str, namespace: str, index: ReleaseIndex | None = None
) -> StoredRelease | None:
    """The latest revision; with an ``index``, the one it remembers while the storage still
    holds exactly that as the newest (no read), and what was read is remembered."""
    if index is not None and (known := index.record(namespace, name)) is not None:
        return known
    secrets = _secrets(api, name, namespace)
    if not secrets:
        return None
    release = _stored(name, namespace, secrets[-1], secrets)
    if index is not None:
        index.remember(release, getattr(secrets[-1].metadata, "resource_version", None))
    return release


async def read(
    api: client.CoreV1Api, ident: ReleaseId, index: ReleaseIndex | None = None
) -> StoredRelease | None:
    """The release's latest revision in Helm's storage (read in a thread), or the one the index
    remembers while the storage still holds exactly that as the newest."""
    return await asyncio.to_thread(latest_release, api, ident.name, ident.namespace, index)


def current_release(api: client.CoreV1Api, name: str, namespace: str) -> StoredRelease | None:
    """The revision Helm's next upgrade starts from: the last deployed one, else the latest. Its
    objects that the new revision no longer renders are deleted by that upgrade."""
    secrets = _secrets(api, name, namespace)
    deployed = [s for s in secrets if (s.metadata.labels or {}).get("status") == "deployed"]
    chosen = deployed or secrets
    return _stored(name, namespace, chosen[-1], secrets) if chosen else None


def ran_before(api: client.CoreV1Api, name: str, namespace: str, fleet: str) -> int | None:
    """The newest revision that ran (deployed or superseded) made from other fleet inputs than
    ``fleet`` (``FLEET_LABEL``): what a rollout's failed wave goes back to (None: there is none)."""
    for s in reversed(_secrets(api, name, namespace)):
        labels = s.metadata.labels or {}
        if labels.get("status") in ("deployed", "superseded") and labels.get(FLEET_LABEL) != fleet:
            return int(labels.get("version", "0"))
    return None


def ran_before_revision(api: client.CoreV1Api, name: str, namespace: str, revision: int) -> int | None:
    """The newest revision older than ``revision`` that ran (deployed or superseded): what a
    revision that failed its tests goes back to (None: it is the first that ran)."""
    for s in reversed(_secrets(api, name, namespace)):
        labels = s.metadata.labels or {}
        number = int(labels.get("version", "0"))
        if number < revision and labels.get("status") in ("deployed", "superseded"):
            return number
    return None


def _stored(name: str, namespace: str, secret: Any, secrets: list[Any]) -> StoredRelease:
    """One revision's record; ``secrets``: all of the release's, for its history flags."""
    labels = secret.metadata.labels or {}
    statuses = {(s.metadata.labels or {}).get("status") for s in secrets}
    return from_body(
        _decoded(namespace, secret),
        name=name,
        namespace=namespace,
        revision=int(labels.get("version", "0")),
        status=labels.get("status", ""),
        labels=labels,
        ever_deployed=bool(statuses & {"deployed", "superseded"}),
    )


def unlock(api: client.CoreV1Api, name: str, namespace: str) -> StoredRelease | None:
    """Mark a stale ``pending-*`` latest revision as ``failed`` so Helm accepts new operations.

    Written only under the release lock, when no ``helm`` of ours runs for the release: a pending
    status then means the process that wrote it is gone (killed mid-upgrade).
    """
    secrets = _secrets(api, name, namespace)
    if not secrets:
        return None
    latest = secrets[-1]
    if (latest.metadata.labels or {}).get("status") not in PENDING_STATUSES:
        return _stored(name, namespace, latest, secrets)  # finished meanwhile: nothing to unlock
    body = decode_release(latest.data["release"])
    previous = (body.get("info") or {}).get("status", "")
    body.setdefault("info", {})["status"] = "failed"
    body["info"]["description"] = f"{UNLOCKED_PREFIX} from stale {previous}"
    latest.data["release"] = encode_release(body)
    latest.metadata.labels["status"] = "failed"
    api.replace_namespaced_secret(latest.metadata.name, namespace, latest)
    return latest_release(api, name, namespace)
