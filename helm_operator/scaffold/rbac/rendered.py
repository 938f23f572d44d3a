"""Reading manifests: what ``helm template`` rendered (sources marked), its kinds, CRDs and lookups."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

import yaml

from helm_operator.scaffold.rbac.resources import CRD_GROUP, ApiResource, group_of

# ---------------------------------------------------------------------------------------------
# Reading manifests


class FromCrdsFolder(dict[str, Any]):
    """A rendered object that Helm takes from a chart's ``crds/`` folder (not a template): it is
    only ever created, never updated on upgrade nor deleted."""


_SOURCE = re.compile(r"^# Source: (\S.*?)\s*$", re.MULTILINE)
_SEPARATOR = re.compile(r"^---(?:[ \t].*)?$", re.MULTILINE)
_CRDS_FOLDER = re.compile(r"^[^/]+(?:/charts/[^/]+)*/crds/")


def rendered_documents(stream: str) -> list[dict[str, Any]]:
    """The objects of ``helm template --include-crds`` output; those from a ``crds/`` folder (of
    the chart or a subchart: Helm's ``# Source: <chart>/crds/<file>`` line, which holds for every
    document of that file) as :class:`FromCrdsFolder`. Raises ``yaml.YAMLError``."""
    out: list[dict[str, Any]] = []
    source = ""
    for chunk in _SEPARATOR.split(stream):
        found = _SOURCE.search(chunk)
        if found:
            source = found.group(1)
        from_crds = bool(_CRDS_FOLDER.match(source))
        for doc in yaml.safe_load_all(chunk):
            if not isinstance(doc, dict):
                continue
            if from_crds:
                doc = FromCrdsFolder(doc)
                if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
                    doc["items"] = [FromCrdsFolder(i) if isinstance(i, dict) else i for i in doc["items"]]
            out.append(doc)
    return out


def objects(docs: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """Every object in a stream of rendered documents, the items of ``kind: List`` included."""
    for doc in docs:
        if not isinstance(doc, dict) or not doc.get("kind"):
            continue
        if str(doc["kind"]).endswith("List") and isinstance(doc.get("items"), list):
            yield from objects(doc["items"])
        else:
            yield doc


def kinds_in(docs: Iterable[Any]) -> set[tuple[str, str]]:
    """(apiVersion, kind) of every rendered object."""
    return {(str(d.get("apiVersion", "")), str(d["kind"])) for d in objects(docs)}


def crd_resources(docs: Iterable[Any]) -> dict[tuple[str, str], ApiResource]:
    """The kinds the CustomResourceDefinitions among ``docs`` define, by (group, kind)."""
    found: dict[tuple[str, str], ApiResource] = {}
    for d in objects(docs):
        if d["kind"] != "CustomResourceDefinition" or group_of(str(d.get("apiVersion"))) != CRD_GROUP:
            continue
        spec = d.get("spec") or {}
        names = spec.get("names") or {}
        if spec.get("group") and names.get("kind") and names.get("plural"):
            group, kind = str(spec["group"]), str(names["kind"])
            found[(group, kind)] = ApiResource(group, str(names["plural"]), spec.get("scope") != "Cluster")
    return found


_LOOKUP = re.compile(r'\blookup\s+"([^"]*)"\s+"([^"]+)"')


def lookups_in(template: str) -> set[tuple[str, str]]:
    """(apiVersion, kind) read by Helm's ``lookup`` function with literal arguments."""
    return {(m.group(1), m.group(2)) for m in _LOOKUP.finditer(template)}
