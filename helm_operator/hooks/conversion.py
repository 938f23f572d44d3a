"""API versions converted by the hook module's converters (pure): the way from one version to
another, one object converted, a whole ``ConversionReview`` answered, and the start-up check that
every pair of served versions has a way.

A way is a converter declared for the pair, or two through the watch's version (the hub, whose
spec feeds the chart): ``v1 -> v2 -> v3``. A converter receives a copy of the whole object and
returns it in the target version; what it may not change (metadata other than labels and
annotations) is put back as it came, and ``apiVersion`` is set. An object that cannot be
converted fails the whole review with a message naming the object and the converter: the API
server then refuses the request with it, and never stores or returns an unconverted object. A
write of an object that converts to its stored version but not to another served version is
refused too (``admission``): stored, it would make every read in that version fail.
"""

from __future__ import annotations

import copy
import json
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import permutations
from typing import TYPE_CHECKING, Any

from helm_operator.hooks.registry import Converter, Hooks

if TYPE_CHECKING:
    from helm_operator.config.watches import Watch

CONVERTIBLE_METADATA = ("labels", "annotations")


class ConversionError(Exception):
    """An object that cannot be converted: no way between its versions, or a converter failed."""


@dataclass(frozen=True)
class Kind:
    """What the webhook knows of one kind: its group, the hub version and the converters."""

    group: str
    kind: str
    hub: str
    converters: Mapping[tuple[str, str], Converter]


def kinds(watches: Sequence[Watch], hooks: Mapping[str, Hooks]) -> dict[tuple[str, str], Kind]:
    """The watched kinds whose hook modules declare converters, the watch's version their hub:
    what the webhook converts and ``diff`` converts manifests with."""
    return {
        (w.group, w.kind): Kind(w.group, w.kind, w.version, dict(hooks[w.key].converters))
        for w in watches
        if w.key in hooks and hooks[w.key].converters
    }


def way(kind: Kind, source: str, target: str) -> list[tuple[str, str]] | None:
    """The converters to run from ``source`` to ``target`` (empty: the same version; None: none)."""
    if source == target:
        return []
    if (source, target) in kind.converters:
        return [(source, target)]
    steps = [(source, kind.hub), (kind.hub, target)]
    if all(s in kind.converters or s[0] == s[1] for s in steps):
        return [s for s in steps if s[0] != s[1]]
    return None


def missing(kind: Kind, served: Sequence[str]) -> list[tuple[str, str]]:
    """The pairs of served versions with no way between them (what start-up refuses)."""
    return [(a, b) for a, b in permutations(served, 2) if way(kind, a, b) is None]


def differing(versions: Sequence[Mapping[str, Any]]) -> list[str]:
    """The served versions of a CRD whose schemas differ (empty: one version, or all the same
    schema, where the API server's relabelling loses nothing). A CRD like that needs converters:
    without them the API server hands a v1 object to a v2 reader with its v1 fields pruned."""
    served = [v for v in versions if v.get("served")]
    schemas = {json.dumps(v.get("schema") or {}, sort_keys=True) for v in served}
    return [str(v["name"]) for v in served] if len(schemas) > 1 else []


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))


def _where(fn: Converter, exc: BaseException) -> str:
    """``file:line`` in the converter's own module where it failed (not in a library it called)."""
    frames = traceback.extract_tb(exc.__traceback__)
    code = getattr(fn, "__code__", None)
    own = [f for f in frames if code is not None and f.filename == code.co_filename] or frames[-1:]
    return f"{own[-1].filename.rsplit('/', 1)[-1]}:{own[-1].lineno}"


def convert(kind: Kind, obj: Mapping[str, Any], target: str) -> dict[str, Any]:
    """``obj`` in version ``target``; ``ConversionError`` naming the object and the converter."""
    source = str(obj.get("apiVersion", "")).rpartition("/")[2]
    steps = way(kind, source, target)
    if steps is None:
        raise ConversionError(
            f"{kind.kind} {_name(obj)}: no converter from {source} to {target} "
            f"(declare @hooks.convert({source!r}, {target!r}), or both ways through {kind.hub})"
        )
    out = copy.deepcopy(dict(obj))
    meta = copy.deepcopy(dict(obj.get("metadata") or {}))
    for a, b in steps:
        fn = kind.converters[(a, b)]
        try:
            result = fn(copy.deepcopy(out))
        except Exception as exc:
            where = _where(fn, exc)
            raise ConversionError(
                f"{kind.kind} {_name(obj)}: converter {a} -> {b} ({fn.__name__}, {where}) failed: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        if not isinstance(result, Mapping):
            code = getattr(fn, "__code__", None)
            at = f", {code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}" if code else ""
            raise ConversionError(
                f"{kind.kind} {_name(obj)}: converter {a} -> {b} ({fn.__name__}{at}) returned "
                f"{type(result).__name__}, not the object (return the converted object)"
            )
        out = dict(result)
        out["apiVersion"] = f"{kind.group}/{b}" if kind.group else b
        out["kind"] = kind.kind
        changed = out.get("metadata") or {}
        out["metadata"] = {
            **{k: v for k, v in meta.items() if k not in CONVERTIBLE_METADATA},
            **{k: changed[k] for k in CONVERTIBLE_METADATA if k in changed},
        }
    return out


def review(kinds: Mapping[tuple[str, str], Kind], body: Mapping[str, Any]) -> dict[str, Any]:
    """The answer to an ``apiextensions.k8s.io/v1`` ``ConversionReview``."""
    request = body.get("request") or {}
    uid = request.get("uid", "")
    desired = str(request.get("desiredAPIVersion", ""))
    group, _, target = desired.rpartition("/")
    converted = []
    try:
        for obj in request.get("objects") or []:
            kind = kinds.get((group, str(obj.get("kind"))))
            if kind is None:
                raise ConversionError(f"this operator converts no {obj.get('kind')} of group {group!r}")
            converted.append(convert(kind, obj, target))
    except ConversionError as exc:
        result: dict[str, Any] = {"status": "Failure", "message": str(exc)}
        return _answer(uid, [], result)
    return _answer(uid, converted, {"status": "Success"})


def _answer(uid: str, objects: list[dict[str, Any]], result: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": {"uid": uid, "convertedObjects": objects, "result": result},
    }


def unreadable(kind: Kind, obj: Mapping[str, Any], served: Sequence[str]) -> str | None:
    """Why ``obj`` could not be read back in one of the ``served`` versions (None: it can be in
    every one): what a write is refused for, before one object makes every read of a version fail."""
    source = str(obj.get("apiVersion", "")).rpartition("/")[2]
    for version in served:
        if version == source:
            continue
        try:
            convert(kind, obj, version)
        except ConversionError as exc:
            return f"it could not be read as {version}: {exc}"
    return None


def admission(
    kinds: Mapping[tuple[str, str], Kind],
    served: Mapping[tuple[str, str], Sequence[str]],
    body: Mapping[str, Any],
) -> dict[str, Any]:
    """The answer to an ``admission.k8s.io/v1`` ``AdmissionReview`` of a converted kind's write:
    allowed when the object converts to every served version, else denied with the converter's
    message (a kind this operator does not convert is allowed: not its to judge; so is an object
    being deleted, whose finalizers must be able to go)."""
    request = body.get("request") or {}
    obj = request.get("object") or {}
    resource = request.get("kind") or {}
    key = (str(resource.get("group", "")), str(resource.get("kind", "")))
    going = bool((obj.get("metadata") or {}).get("deletionTimestamp"))  # its finalizers may go
    why = unreadable(kinds[key], obj, served.get(key) or ()) if key in kinds and not going else None
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": why is None}
    if why is not None:
        response["status"] = {"code": 422, "reason": "Invalid", "message": why}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
