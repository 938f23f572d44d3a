"""Chart references and chart loading: what the operator knows about a chart before calling Helm."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class ChartRef:
    """A local chart directory or packaged ``.tgz``, or a remote reference (repo URL or ``oci://``)."""

    ref: str
    path: Path | None = None
    version: str | None = None
    repo: str | None = None

    @property
    def is_local(self) -> bool:
        return self.path is not None


@dataclass(frozen=True)
class ChartInfo:
    """What the operator needs to know about a chart before calling Helm."""

    name: str
    version: str
    app_version: str | None
    defaults: dict[str, Any]
    schema: Mapping[str, Any] | None
    content_digest: str
    compressed_size: int = 0  # bytes of the chart's files gzipped: what the chart adds to a release record


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
    compressed = len(gzip.compress(b"".join(files[n] for n in sorted(files)), 6))
    return ChartInfo(
        name=str(meta.get("name", "")),
        version=str(meta.get("version", "")),
        app_version=str(meta["appVersion"]) if meta.get("appVersion") is not None else None,
        defaults=defaults,
        schema=schema,
        content_digest=h.hexdigest(),
        compressed_size=compressed,
    )
