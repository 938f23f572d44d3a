"""What the user's ``kubectl apply`` of a file sends, so ``diff`` can ask the API server (in a
dry-run) what that apply would store, instead of guessing it. Pure.

The two apply styles store different things for the same file, most visibly for ``null``:

- client-side (kubectl's default): a new object is created with a copy of the file in the
  ``last-applied-configuration`` annotation (``null``s included there) and every ``null`` removed
  from the object itself. An existing one gets kubectl's three-way JSON merge patch
  (``CreateThreeWayJSONMergePatch``; custom resources have no strategic merge): additions and
  changes against the live object, deletions against the last applied copy. A ``null`` in the file
  is never sent as a value, only as the deletion of a key (and not even that when the last applied
  copy had the same ``null``).
- server-side (``--server-side``): the file as it is, ``null``s included, as an apply patch of field
  manager ``kubectl``.

The API server then prunes or keeps what it is sent by the CRD's schema.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

ApplyStyle = Literal["client-side", "server-side"]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# kubectl's field managers (its ``--field-manager`` defaults) for each style.
FIELD_MANAGER: dict[ApplyStyle, str] = {
    "client-side": "kubectl-client-side-apply",
    "server-side": "kubectl",
}

Json = Any


@dataclass(frozen=True)
class Apply:
    """How the user will apply the file: the ``kubectl apply`` flags that change what is stored."""

    style: ApplyStyle = "client-side"
    field_manager: str | None = None  # None: kubectl's default for the style
    force_conflicts: bool = False  # server-side: take fields other managers own

    @property
    def manager(self) -> str:
        return self.field_manager or FIELD_MANAGER[self.style]


def last_applied_config(doc: Mapping[str, Any]) -> str:
    """The annotation's value for ``doc``: the object without that annotation (an empty
    ``annotations`` map kept), as Go's JSON encoder writes it, so a re-apply of an unchanged file
    sends nothing, as kubectl's does."""
    obj = copy.deepcopy(dict(doc))
    meta = dict(obj.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    annotations.pop(LAST_APPLIED, None)
    meta["annotations"] = annotations
    obj["metadata"] = meta
    return go_json(obj) + "\n"


def go_json(value: Json) -> str:
    """``value`` as Go's ``encoding/json`` encodes kubectl's objects: compact, map keys sorted,
    ``<``, ``>`` and ``&`` escaped, integers beyond int64 as floats, floats in Go's shortest form
    (``1`` for 1.0, ``1e-7``, ``1e+21``)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value) if -(2**63) <= value < 2**63 else _go_float(float(value))
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, Mapping):
        items = sorted(
            ((k if isinstance(k, str) else json.dumps(k), v) for k, v in value.items()), key=_first
        )
        return "{" + ",".join(f"{_go_string(k)}:{go_json(v)}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    return _go_string(str(value))


def _first(item: tuple[str, Any]) -> str:
    return item[0]


def _go_string(text: str) -> str:
    out = json.dumps(text, ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        out = out.replace(char, escaped)
    return out.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _go_float(number: float) -> str:
    if math.isnan(number) or math.isinf(number):
        raise ValueError(f"{number} is not a JSON number")
    if number and not 1e-6 <= abs(number) < 1e21:
        mantissa, _, exponent = repr(number).partition("e")  # always exponent form out there
        sign, digits = exponent[0], exponent[1:]
        if sign == "-" and len(digits) == 2 and digits[0] == "0":
            digits = digits[1:]
        return f"{mantissa}e{sign}{digits}"
    text = format(Decimal(repr(number)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def with_last_applied(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` as client-side apply sends it: annotated with its own copy."""
    out = copy.deepcopy(dict(doc))
    meta = dict(out.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), LAST_APPLIED: last_applied_config(doc)}
    out["metadata"] = meta
    return out


def client_side_create(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The object client-side apply creates: annotated with the file as written, then every
    ``null`` of the object removed (from maps, also inside lists), as an update would leave it."""
    out = with_last_applied(doc)
    _prune_nulls(out)
    return out


def _prune_nulls(value: Json) -> None:
    if isinstance(value, dict):
        for key in [k for k, v in value.items() if v is None]:
            del value[key]
        for item in value.values():
            _prune_nulls(item)
    elif isinstance(value, list):
        for item in value:
            _prune_nulls(item)


def original_config(live: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the last client-side apply wrote (None: never applied client-side). Raises
    ``ValueError`` for an annotation kubectl could not read either."""
    text = ((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    if not text:
        return None
    try:
        original = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"annotation {LAST_APPLIED} is not valid JSON: {exc}") from None
    if not isinstance(original, dict):
        raise ValueError(f"annotation {LAST_APPLIED} is not a JSON object")
    return original


def client_side_patch(
    original: Mapping[str, Any] | None, modified: Mapping[str, Any], current: Mapping[str, Any]
) -> dict[str, Any]:
    """kubectl's three-way JSON merge patch of an existing object: what changed from ``current``
    (the live object) to ``modified`` (``with_last_applied(file)``) without any ``null``, and only
    the ``null``s of what changed from ``original`` (the last applied copy) to ``modified``:
    deletions."""
    additions = _filtered(_diff(current, modified), keep_null=False)
    deletions = _filtered(_diff(original or {}, modified), keep_null=True)
    return _merged(deletions, additions)


def _kind(value: Json) -> str:
    """A value's JSON type, as Go decodes it (every number is a float64)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string"


def _same(a: Json, b: Json) -> bool:
    kind = _kind(a)
    if kind != _kind(b):
        return False
    if kind == "object":
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if kind == "array":
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if kind == "number":  # as the float64s Go compares
        return float(a) == float(b)
    return bool(a == b)


def _diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch from ``a`` to ``b`` (evanphx/json-patch ``CreateMergePatch``): a key
    added or of another type whole, maps recursively, lists whole, a removed key as ``null``."""
    out: dict[str, Any] = {}
    for key, new in b.items():
        if key not in a or _kind(a[key]) != _kind(new):
            out[key] = new
        elif _kind(new) == "object":
            inner = _diff(a[key], new)
            if inner:
                out[key] = inner
        elif not _same(a[key], new):
            out[key] = new
    out.update({key: None for key in a if key not in b})
    return out


def _filtered(patch: Mapping[str, Any], keep_null: bool) -> dict[str, Any]:
    """Only the ``null``s of a patch (``keep_null``), or all but them (kubectl's
    ``keepOrDeleteNullInObj``): a map left empty by the filter is dropped, an empty map the patch
    sets is a value."""
    out: dict[str, Any] = {}
    for key, value in patch.items():
        if value is None:
            if keep_null:
                out[key] = None
        elif isinstance(value, Mapping):
            if not value:
                if not keep_null:
                    out[key] = {}
                continue
            inner = _filtered(value, keep_null)
            if inner:
                out[key] = inner
        elif not keep_null:
            out[key] = copy.deepcopy(value)
    return out


def _merged(doc: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``patch`` (no ``null`` values) merged into ``doc`` as evanphx/json-patch ``MergePatch`` does:
    maps into maps recursively, anything else replaced, and what lands where ``doc`` has no map
    loses its ``null``s (inside lists too)."""
    out = copy.deepcopy(dict(doc))
    for key, value in patch.items():
        have = out.get(key)
        if isinstance(have, Mapping):
            out[key] = _merged(have, value) if isinstance(value, Mapping) else copy.deepcopy(value)
        else:
            out[key] = copy.deepcopy(value)
            _prune_nulls(out[key])
    return out
