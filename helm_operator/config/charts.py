"""Chart references and chart loading: what the operator knows about a chart before calling Helm."""

from __future__ import annotations

import contextlib
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
    # What Helm creates from `crds/` folders (the chart's and its subcharts') on a first install,
    # before rendering: each as (file, "CustomResourceDefinition/<name>", subchart condition).
    crds: tuple[ChartCrd, ...] = ()


@dataclass(frozen=True)
class ChartCrd:
    """A CustomResourceDefinition in a chart's (or a subchart's) ``crds/`` folder."""

    file: str  # path inside the chart, e.g. ``crds/widgets.yaml`` or ``charts/sub/crds/x.yaml``
    name: str  # ``CustomResourceDefinition/<name>`` (the file's name where the document has none)
    condition: str | None = None  # the subchart's `condition` in Chart.yaml: absent when it is false


_MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")  # what Helm loads from crds/


def _crds_of(files: Mapping[str, bytes], prefix: str = "", condition: str | None = None) -> list[ChartCrd]:
    """The CRDs Helm would install from a chart's files, subcharts (folders and .tgz) included."""
    found: list[ChartCrd] = []
    for path, data in sorted(files.items()):
        if path.startswith("crds/") and path.endswith(_MANIFEST_SUFFIXES):
            names: list[str] = []
            with contextlib.suppress(yaml.YAMLError):
                names = [
                    f"{d.get('kind', 'CustomResourceDefinition')}/{(d.get('metadata') or {}).get('name')}"
                    for d in yaml.safe_load_all(data)
                    if isinstance(d, dict)
                ]
            for name in names or [f"CustomResourceDefinition/{path}"]:
                found.append(ChartCrd(prefix + path, name, condition))
    conditions = _dependency_conditions(files.get("Chart.yaml", b""))
    subcharts: dict[str, dict[str, bytes]] = {}
    for path, data in files.items():
        parts = path.split("/")
        if len(parts) >= 3 and parts[0] == "charts":
            subcharts.setdefault(parts[1], {})["/".join(parts[2:])] = data
        elif len(parts) == 2 and parts[0] == "charts" and path.endswith(".tgz"):
            with contextlib.suppress(tarfile.TarError, OSError):
                subcharts[parts[1]] = _members_of_tgz(io.BytesIO(data))
    for sub, sub_files in sorted(subcharts.items()):
        meta: Any = {}
        with contextlib.suppress(yaml.YAMLError):
            meta = yaml.safe_load(sub_files.get("Chart.yaml", b"")) or {}
        sub_name = str(
            meta.get("name") if isinstance(meta, dict) and meta.get("name") else sub.removesuffix(".tgz")
        )
        found += _crds_of(sub_files, f"{prefix}charts/{sub}/", conditions.get(sub_name) or condition)
    return found


def _dependency_conditions(chart_yaml: bytes) -> dict[str, str]:
    """Each dependency's `condition` (by name and alias) from a Chart.yaml."""
    try:
        meta = yaml.safe_load(chart_yaml) or {}
    except yaml.YAMLError:
        return {}
    out: dict[str, str] = {}
    for dep in meta.get("dependencies") or () if isinstance(meta, dict) else ():
        if isinstance(dep, dict) and dep.get("condition"):
            for key in (dep.get("name"), dep.get("alias")):
                if key:
                    out[str(key)] = str(dep["condition"])
    return out


def installed_crds(chart: ChartInfo, values: Mapping[str, Any]) -> list[ChartCrd]:
    """The chart's CRDs a first install would create with these values (the chart's defaults
    already merged in): a subchart whose first `condition` path is false creates none."""
    out = []
    for crd in chart.crds:
        enabled = True
        if crd.condition:
            path = crd.condition.split(",")[0].strip()
            node: Any = values
            for part in path.split("."):
                node = node.get(part) if isinstance(node, Mapping) else None
            enabled = node is not False
        if enabled:
            out.append(crd)
    return out


def _files_of_dir(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    }


def _files_of_tgz(path: Path) -> dict[str, bytes]:
    with path.open("rb") as fh:
        return _members_of_tgz(fh)


def _members_of_tgz(stream: Any) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=stream, mode="r:gz") as tar:
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
        crds=tuple(_crds_of(files)),
    )
