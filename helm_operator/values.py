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
import io
import json
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from helm_operator.watches import ChartRef

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


@dataclass(frozen=True)
class ChartInfo:
    """What the operator needs to know about a chart before calling Helm."""

    name: str
    version: str
    app_version: str | None
    defaults: Values
    schema: Mapping[str, Any] | None
    content_digest: str


def _files_of_dir(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    }


def _files_of_tgz(path: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    with tarfile.open(path, "r:gz") as tar:
        for member in tar.getmembers():
            if member.isfile():
                fh = tar.extractfile(member)
                if fh is not None:
                    # Strip the top directory (the chart name) so paths match a directory chart.
                    files[member.name.split("/", 1)[-1]] = fh.read()
    return files


def load_chart(ref: ChartRef) -> ChartInfo:
    """Read a local chart (directory or .tgz): metadata, defaults, schema and a content digest."""
    if ref.path is None:
        raise ValueError(f"chart {ref.ref} is not local; pull it first")
    files = _files_of_dir(ref.path) if ref.path.is_dir() else _files_of_tgz(ref.path)
    meta = yaml.safe_load(io.BytesIO(files["Chart.yaml"])) or {}
    defaults = yaml.safe_load(io.BytesIO(files.get("values.yaml", b""))) or {}
    schema_raw = files.get("values.schema.json")
    schema = json.loads(schema_raw) if schema_raw else None
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return ChartInfo(
        name=str(meta.get("name", "")),
        version=str(meta.get("version", "")),
        app_version=str(meta["appVersion"]) if meta.get("appVersion") is not None else None,
        defaults=defaults,
        schema=schema,
        content_digest=h.hexdigest(),
    )


def digest(chart: ChartInfo, values: Mapping[str, Any]) -> str:
    """Stable digest of what a release should be (label-safe hex), independent of key order."""
    doc = {"chart": [chart.name, chart.version, chart.content_digest], "values": values}
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]
