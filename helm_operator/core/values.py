"""The values pipeline: chart defaults ◄ CR spec ◄ overrideValues, schema check, digest.

Merging follows Helm, not pyhelm3: maps merge deeply, lists and scalars replace, and ``null``
removes a key. We always hand Helm one already-merged document, so pyhelm3's list concatenation
never applies.

The digest covers the chart's identity and content and the final user values. It is what decides
whether any Helm work is due: equal digests mean nothing to do, without running ``helm``.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

from helm_operator.config.charts import ChartInfo

Values = dict[str, Any]


def merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> Values:
    """Helm's coalescing: deep-merge maps, replace lists/scalars, delete keys set to ``None``."""
    out: Values = copy.deepcopy(dict(base))
    for key, value in overlay.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def user_values(spec: Mapping[str, Any] | None, overrides: Mapping[str, Any]) -> Values:
    """What we hand to Helm (and what ``helm get values`` shows): the spec with overrides on top."""
    return merge(spec or {}, overrides)


@dataclass(frozen=True)
class SchemaViolation:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def _json_path(parts: Any) -> str:
    out = "spec"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def validate(values: Mapping[str, Any], schema: Mapping[str, Any] | None) -> list[SchemaViolation]:
    """Check the final values (defaults included) against the chart's ``values.schema.json``.

    Paths are given from the CR's point of view (``spec.replicas``), sorted, one per violation.
    """
    if not schema:
        return []
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    validator = cls(schema)
    found = [
        SchemaViolation(_json_path(err.absolute_path), err.message) for err in validator.iter_errors(values)
    ]
    return sorted(found, key=lambda v: (v.path, v.message))


def digest(chart: ChartInfo, values: Mapping[str, Any], owner_uid: str = "", shard: str | None = None) -> str:
    """Stable digest of what a release should be (label-safe hex), independent of key order.

    The owner's uid is part of it: a resource deleted and created again under the same name (its
    release left behind) gets one upgrade, which re-renders its objects with the new owner and
    re-creates what garbage collection removed, instead of adopting the release as it is. So is a
    named shard: a resource moved to another shard gets one upgrade by its new instance, which
    labels its objects and release record for that instance's watches (not sharded or unsharded:
    the digest is what it always was).
    """
    doc: dict[str, Any] = {
        "chart": [chart.name, chart.version, chart.content_digest],
        "values": values,
        "owner": owner_uid,
    }
    if shard:
        doc["shard"] = shard
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]
