"""A chart's values as a CustomResourceDefinition: pure functions, no files, no Helm.

The ``spec`` of a custom resource is the chart's values, so its OpenAPI schema is generated from
the chart's ``values.schema.json`` (JSON Schema, draft-07 and friends) or, without one, inferred
from ``values.yaml``. The API server then rejects a wrong spec at ``kubectl apply`` time, names the
field, and ``kubectl explain`` documents it.

Kubernetes accepts only *structural* schemas: every node typed (or explicitly free-form), no
``$ref``, no type unions, ``properties`` and ``additionalProperties`` mutually exclusive, a fixed set
of keywords. What cannot be expressed becomes a free-form node (``x-kubernetes-preserve-unknown-
fields``), never an error: the operator still validates the merged values against the chart's own
schema before Helm runs, so nothing is lost, only checked later.

Two rules follow from "spec is merged over the chart's defaults": a property the schema requires
but ``values.yaml`` already sets is not required in the spec, and values.yaml's defaults are not
copied into the CRD (the API server would write them into every resource, so ``helm get values``
would no longer show what the user wrote; a ``default`` the schema itself declares is kept).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

PRESERVE = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING = "x-kubernetes-int-or-string"
CATEGORY = "helm-operator"

# Maps whose keys the user chooses, or whose shape is a Kubernetes type the chart passes through
# with toYaml: inferred as free-form, however the default looks.
FREE_FORM_KEYS = frozenset(
    {
        "affinity",
        "annotations",
        "commonAnnotations",
        "commonLabels",
        "containerSecurityContext",
        "env",
        "extraEnv",
        "extraEnvVars",
        "extraVolumeMounts",
        "extraVolumes",
        "labels",
        "livenessProbe",
        "nodeSelector",
        "podAnnotations",
        "podLabels",
        "podSecurityContext",
        "readinessProbe",
        "resources",
        "securityContext",
        "startupProbe",
        "tolerations",
        "topologySpreadConstraints",
    }
)

# Formats the API server knows; others would only be ignored, and confuse readers.
KNOWN_FORMATS = frozenset(
    {
        "byte",
        "cidr",
        "date",
        "date-time",
        "datetime",
        "double",
        "duration",
        "email",
        "float",
        "hostname",
        "int32",
        "int64",
        "ipv4",
        "ipv6",
        "mac",
        "password",
        "uri",
        "uuid",
    }
)

_JSON_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
_SCALAR_TYPES = frozenset({"string", "integer", "number", "boolean"})
# Value validations, by the JSON type they constrain (k8s applies each only to values of its type).
_CHECKS: dict[str, tuple[str, ...]] = {
    "string": ("minLength", "maxLength", "pattern", "format"),
    "integer": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "format"),
    "boolean": (),
    "array": ("minItems", "maxItems"),
    "object": ("minProperties", "maxProperties"),
}
_ALL_CHECKS = tuple(dict.fromkeys(k for keys in _CHECKS.values() for k in keys))
# Keys a oneOf/anyOf branch may hold and still be read as "one more allowed type".
_TYPE_BRANCH_KEYS = frozenset({"type", "description", "title", "$comment", *_ALL_CHECKS})
# Keys of a oneOf/anyOf branch that only restate which properties must be present.
_REQUIRED_BRANCH_KEYS = frozenset({"required", "description", "title", "$comment"})

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$")
_KIND = re.compile(r"^[A-Z][A-Za-z0-9]*$")

PRINTER_COLUMNS: tuple[dict[str, Any], ...] = (
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    # Shown by default: a held change reads Ready True with the gate's reason (UpgradePending,
    # AwaitingApproval, RolloutPending), and a plain `kubectl get` must tell it from a finished one.
    {"name": "Reason", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'},
    {"name": "Revision", "type": "integer", "jsonPath": ".status.release.revision"},
    {"name": "Chart", "type": "string", "jsonPath": ".status.release.chartRef"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)

STATUS_SCHEMA: dict[str, Any] = {
    "description": (
        "Written by helm-operator - conditions (Ready, Reconciling, Stalled, Released, Remediated,"
        " Drifted), the Helm release and recent history."
    ),
    "type": "object",
    PRESERVE: True,
}


class SchemaError(ValueError):
    """A values schema that cannot be read; says where in the file (a JSON pointer)."""

    def __init__(self, pointer: str, message: str) -> None:
        self.pointer = pointer or "#"
        super().__init__(f"{self.pointer}: {message}")


# --- names -------------------------------------------------------------------------------------


# Last words of a kind that are their own plural: uncountable, or plural already (a chart serves
# the metrics, the settings, ...). Words ending in "ics" (metrics, analytics, diagnostics) too.
UNCOUNTABLE = frozenset(
    {
        "credentials",
        "data",
        "equipment",
        "feedback",
        "firmware",
        "hardware",
        "info",
        "information",
        "metadata",
        "middleware",
        "news",
        "series",
        "settings",
        "software",
        "species",
        "stats",
        "traffic",
    }
)
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z][a-z0-9]*|[a-z0-9]+")


def plural_of(kind: str) -> str:
    """The resource name of a kind by English rules, on its last CamelCase word: Nginx → nginxes,
    Policy → policies, Class → classes, Gateway → gateways, Memcached → memcacheds, and words that
    are their own plural unchanged: KubeStateMetrics → kubestatemetrics, CacheData → cachedata."""
    word = kind.lower()
    words = _WORDS.findall(kind)
    last = words[-1].lower() if words else word
    if last in UNCOUNTABLE or last.endswith("ics"):
        return word
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and len(word) > 1 and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def check_names(group: str, version: str, kind: str, plural: str, short_names: Iterable[str] = ()) -> None:
    """Raise ValueError naming the flag when the API server would refuse the CRD's names."""
    if not _DNS_SUBDOMAIN.match(group):
        raise ValueError(f"--group: a CRD group is a DNS name with at least one dot, got {group!r}")
    if not _DNS_LABEL.match(version):
        raise ValueError(f"--version: expected a lower-case DNS label such as v1alpha1, got {version!r}")
    if not _KIND.match(kind):
        raise ValueError(f"--kind: expected a CamelCase kind name such as RedisCluster, got {kind!r}")
    if not _DNS_LABEL.match(plural):
        raise ValueError(f"--plural: expected a lower-case DNS label, got {plural!r}")
    for short in short_names:
        if not _DNS_LABEL.match(short):
            raise ValueError(f"--short-name: expected a lower-case DNS label, got {short!r}")


# --- JSON Schema → structural schema ------------------------------------------------------------


def _free_form(description: str | None = None, *, nullable: bool = False) -> dict[str, Any]:
    node: dict[str, Any] = {}
    if description:
        node["description"] = description
    if nullable:
        node["nullable"] = True
    node[PRESERVE] = True
    return node


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


class _Converter:
    """One conversion of one schema document; ``$ref`` targets are looked up in ``root``."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.expanding: list[str] = []  # $refs being expanded: a repeat is a recursive schema

    def resolve(self, ref: str, at: str) -> Any:
        if not ref.startswith("#"):
            return None  # another document: not ours to fetch
        target: Any = self.root
        for token in (t for t in ref[1:].split("/") if t):
            key = _unescape(token)
            if isinstance(target, Mapping) and key in target:
                target = target[key]
            elif isinstance(target, list) and key.isdigit() and int(key) < len(target):
                target = target[int(key)]
            else:
                raise SchemaError(f"{at}/$ref", f"{ref!r} points to nothing in this file")
        return target

    def node(self, schema: Any, at: str, defaults: Any = None) -> dict[str, Any] | None:
        """The structural form of ``schema``; None for ``false`` (nothing allowed: leave it out)."""
        if schema is True:
            return _free_form()
        if schema is False:
            return None
        if not isinstance(schema, Mapping):
            raise SchemaError(at, f"expected a schema object, got {type(schema).__name__}")
        if "$ref" in schema:
            return self._ref(schema, at, defaults)
        if "allOf" in schema:
            return self.node(self._all_of(schema, at), at, defaults)
        for combinator in ("oneOf", "anyOf"):
            if combinator in schema:
                merged = self._alternatives(schema, combinator, at)
                if merged is None:
                    return _free_form(_describe(schema))
                return self.node(merged, at, defaults)
        types, nullable = self._types(schema, at)
        if len(types) == 1:
            return self._typed(types[0], schema, at, defaults, nullable)
        node = _head(schema, nullable) | _checks(schema, _ALL_CHECKS)
        if set(types) == {"integer", "string"}:
            node[INT_OR_STRING] = True
        else:
            # No type, or a union Kubernetes cannot type (string or number, object or string):
            # free-form; the value validations still apply to the values of their type.
            node[PRESERVE] = True
        return node

    def _ref(self, schema: Mapping[str, Any], at: str, defaults: Any) -> dict[str, Any] | None:
        ref = schema["$ref"]
        if not isinstance(ref, str):
            raise SchemaError(f"{at}/$ref", f"expected a string, got {ref!r}")
        target = self.resolve(ref, at)
        if target is None or ref in self.expanding:
            note = "recursive" if target is not None else f"defined in {ref}"
            return _free_form(_describe(schema) or f"Free-form ({note}).")
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        merged = {**target, **siblings} if isinstance(target, Mapping) and siblings else target
        self.expanding.append(ref)
        try:
            return self.node(merged, at, defaults)
        finally:
            self.expanding.pop()

    def _deref(self, schema: Any, at: str) -> Any:
        seen = 0
        while isinstance(schema, Mapping) and "$ref" in schema and seen < 32:
            target = self.resolve(str(schema["$ref"]), at)
            if not isinstance(target, Mapping):
                return schema
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
            seen += 1
        return schema

    def _all_of(self, schema: Mapping[str, Any], at: str) -> dict[str, Any]:
        """allOf as one schema: properties and required add up, other keywords: the first wins."""
        parts = schema["allOf"]
        if not isinstance(parts, list):
            raise SchemaError(f"{at}/allOf", "expected a list of schemas")
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        for i, part in enumerate(parts):
            part = self._deref(part, f"{at}/allOf/{i}")
            if not isinstance(part, Mapping):
                continue
            for key, value in part.items():
                if key == "properties" and isinstance(value, Mapping):
                    merged["properties"] = {**(merged.get("properties") or {}), **value}
                elif key == "required" and isinstance(value, list):
                    merged["required"] = list(dict.fromkeys([*(merged.get("required") or []), *value]))
                else:
                    merged.setdefault(key, value)
        return merged

    def _alternatives(self, schema: Mapping[str, Any], combinator: str, at: str) -> dict[str, Any] | None:
        """oneOf/anyOf that a structural schema can still say, as one schema; None when it cannot.

        Branches that only list required properties constrain presence, not shape: dropped.
        Branches that are only a type with its checks are a type union (``[{type: string},
        {type: integer}]`` is int-or-string).
        """
        branches = schema[combinator]
        if not isinstance(branches, list) or not branches:
            raise SchemaError(f"{at}/{combinator}", "expected a non-empty list of schemas")
        rest = {k: v for k, v in schema.items() if k != combinator}
        resolved = [self._deref(b, f"{at}/{combinator}/{i}") for i, b in enumerate(branches)]
        if not all(isinstance(b, Mapping) for b in resolved):
            return None
        if all(set(b) <= _REQUIRED_BRANCH_KEYS for b in resolved):
            return rest
        if not all(set(b) <= _TYPE_BRANCH_KEYS and "type" in b for b in resolved):
            return None
        types: list[str] = []
        branch_types: list[list[str]] = []
        for i, branch in enumerate(resolved):
            found, nullable = self._types(branch, f"{at}/{combinator}/{i}")
            branch_types.append(found)
            types += [t for t in [*found, *(["null"] if nullable else [])] if t not in types]
        if "type" in rest:
            outer, outer_null = self._types(rest, at)
            types = [t for t in types if t in outer or (t == "null" and outer_null)]
        merged: dict[str, Any] = {**rest, "type": types}
        for key in _ALL_CHECKS:
            # A check holds for the union only if every branch it applies to has it, the same.
            applicable = [
                b
                for b, found in zip(resolved, branch_types, strict=True)
                if any(key in _CHECKS[t] for t in found)
            ]
            values = [b.get(key) for b in applicable]
            if (
                key not in rest
                and applicable
                and values[0] is not None
                and values.count(values[0]) == len(values)
            ):
                merged[key] = values[0]
        return merged

    def _types(self, schema: Mapping[str, Any], at: str) -> tuple[list[str], bool]:
        """The JSON types a schema allows (guessed from its keywords when it names none) and
        whether it allows null."""
        raw = schema.get("type")
        if raw is None:
            if "properties" in schema or "additionalProperties" in schema or "required" in schema:
                return ["object"], False
            if "items" in schema:
                return ["array"], False
            return _types_of_values([schema["const"]] if "const" in schema else schema.get("enum"))
        names = [raw] if isinstance(raw, str) else raw
        if not isinstance(names, list) or not names:
            raise SchemaError(f"{at}/type", f"expected a type name or a list of them, got {raw!r}")
        for name in names:
            if name not in _JSON_TYPES:
                raise SchemaError(
                    f"{at}/type", f"unknown type {name!r}; expected one of {', '.join(_JSON_TYPES)}"
                )
        found = list(dict.fromkeys(n for n in names if n != "null"))
        if "number" in found and "integer" in found:
            found.remove("integer")  # every integer is a number
        return found, "null" in names

    def _typed(
        self, kind: str, schema: Mapping[str, Any], at: str, defaults: Any, nullable: bool
    ) -> dict[str, Any]:
        node = _head(schema, nullable, kind) | _checks(schema, _CHECKS[kind])
        if kind == "object":
            node |= self._object(schema, at, defaults)
        elif kind == "array":
            items = schema.get("items")
            converted = self.node(items, f"{at}/items") if isinstance(items, Mapping | bool) else None
            node["items"] = converted if converted is not None else _free_form()
        return node

    def _object(self, schema: Mapping[str, Any], at: str, defaults: Any) -> dict[str, Any]:
        props = schema.get("properties") or {}
        if not isinstance(props, Mapping):
            raise SchemaError(f"{at}/properties", "expected a mapping of property names to schemas")
        extra = schema.get("additionalProperties")
        given = defaults if isinstance(defaults, Mapping) else {}
        out: dict[str, Any] = {}
        properties: dict[str, Any] = {}
        for name, sub in props.items():
            converted = self.node(sub, f"{at}/properties/{_escape(str(name))}", given.get(name))
            if converted is not None:
                properties[str(name)] = converted
        if props and extra is None:
            # values.yaml keys the schema does not describe can still be set: infer them.
            for name, value in given.items():
                if str(name) not in properties:
                    properties[str(name)] = infer(value, str(name))
        patterned = "patternProperties" in schema
        if properties:
            out["properties"] = properties
            if extra is True or isinstance(extra, Mapping) or patterned:
                # Kubernetes cannot have both properties and additionalProperties: keep the named
                # ones typed and let other keys through unchecked.
                out[PRESERVE] = True
        elif isinstance(extra, Mapping) and not patterned:
            value_schema = self.node(extra, f"{at}/additionalProperties")
            out["additionalProperties"] = value_schema if value_schema is not None else _free_form()
        elif extra is not False or patterned:
            out[PRESERVE] = True  # no properties named: a free-form map
        required = schema.get("required") or []
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise SchemaError(f"{at}/required", "expected a list of property names")
        # Required, unless values.yaml already has it (even as null, which the chart's schema then
        # allows): the spec is merged over the defaults, so the merged values have it anyway.
        needed = [r for r in required if r not in given and (r in properties or out.get(PRESERVE))]
        if needed:
            out["required"] = needed
        return out


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _describe(schema: Mapping[str, Any]) -> str | None:
    text = schema.get("description") or schema.get("title")
    return str(text) if text else None


def _head(schema: Mapping[str, Any], nullable: bool, kind: str | None = None) -> dict[str, Any]:
    """description, type, nullable, enum and default: the keys every node may have."""
    node: dict[str, Any] = {}
    description = _describe(schema)
    if description:
        node["description"] = description
    if kind:
        node["type"] = kind
    enum = [schema["const"]] if "const" in schema else schema.get("enum")
    if isinstance(enum, list) and None in enum:
        nullable = True
        enum = [v for v in enum if v is not None]
    if nullable:
        node["nullable"] = True
    if isinstance(enum, list) and enum and nullable:
        # The API server checks an enum before it lets a null through, even when the enum lists
        # null; inside anyOf the same values are checked only on a value that is not null.
        node["anyOf"] = [{"enum": enum}]
    elif isinstance(enum, list) and enum:
        node["enum"] = enum
    if schema.get("default") is not None:
        node["default"] = schema["default"]
    for key, value in schema.items():
        if str(key).startswith("x-kubernetes-"):
            node[key] = value  # the chart author said it for Kubernetes: keep it
    return node


def _checks(schema: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """The value validations among ``keys`` in their OpenAPI v3.0 form."""
    out: dict[str, Any] = {}
    for key in keys:
        value = schema.get(key)
        if value is None or (key == "format" and value not in KNOWN_FORMATS):
            continue
        if key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            # draft-06 and later: the bound itself; OpenAPI v3.0: a flag on minimum/maximum.
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            if isinstance(value, int | float):
                stricter = max if bound == "minimum" else min
                if out.get(bound) is None or stricter(value, out[bound]) == value:
                    out[bound], out[key] = value, True
            continue
        out[key] = value
    return out


def _types_of_values(values: Any) -> tuple[list[str], bool]:
    """The JSON types of enum values (an enum without a type is still typed by its values)."""
    if not isinstance(values, list) or not values:
        return [], False
    names = {
        "boolean"
        if isinstance(v, bool)
        else "integer"
        if isinstance(v, int)
        else "number"
        if isinstance(v, float)
        else "string"
        if isinstance(v, str)
        else "null"
        if v is None
        else "other"
        for v in values
    }
    nullable = "null" in names
    names.discard("null")
    if "other" in names:
        return [], nullable
    if names == {"integer", "number"}:
        names = {"number"}
    return sorted(names), nullable


def convert(schema: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The structural form of a chart's ``values.schema.json`` (its root must describe an object).

    ``defaults`` (values.yaml) relaxes ``required`` and describes keys the schema leaves out.
    """
    if not isinstance(schema, Mapping):
        raise SchemaError("#", f"expected a JSON object, got {type(schema).__name__}")
    node = _Converter(schema).node(schema, "#", defaults or {})
    if node is None or node.get("type", "object") != "object":
        raise SchemaError("#/type", "the root of a values schema must describe an object (the values)")
    node.pop("nullable", None)
    node["type"] = "object"
    return node


# --- inference from values.yaml ------------------------------------------------------------------


def infer(value: Any, key: str = "") -> dict[str, Any]:
    """A schema for a values.yaml entry from its default: its type, and for maps their keys.

    Empty maps, ``null`` and the usual pass-through keys (labels, annotations, resources, affinity,
    …) are free-form: their default says nothing about what users put there.
    """
    if value is None:
        return _free_form(nullable=True)
    if key in FREE_FORM_KEYS:
        if isinstance(value, list):
            return {"type": "array", "items": _free_form()}
        if isinstance(value, Mapping):
            return {"type": "object", PRESERVE: True}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        return {"type": "array", "items": _infer_items(value)}
    if isinstance(value, Mapping):
        if not value:
            return {"type": "object", PRESERVE: True}
        return {"type": "object", "properties": {str(k): infer(v, str(k)) for k, v in value.items()}}
    return _free_form()  # dates and other YAML oddities


def _infer_items(values: list[Any]) -> dict[str, Any]:
    """The item schema of a list: the first element's type; maps take the keys of every element."""
    if not values or values[0] is None:
        return _free_form()
    if all(isinstance(v, Mapping) for v in values):
        merged: dict[str, Any] = {}
        for v in values:
            for k, sub in v.items():
                merged.setdefault(k, sub)
        return infer(merged) if merged else {"type": "object", PRESERVE: True}
    return infer(values[0])


def spec_schema(schema: Mapping[str, Any] | None, defaults: Mapping[str, Any], chart: str) -> dict[str, Any]:
    """The schema of ``spec``: converted from the chart's schema, or inferred from its defaults."""
    if schema is not None:
        node = convert(schema, defaults)
        source = "checked against the chart's values.schema.json"
    else:
        node = infer(dict(defaults)) if defaults else {"type": "object", PRESERVE: True}
        source = "types inferred from the chart's values.yaml"
    node.pop("description", None)  # the root's title ("X values") says less than this:
    about = f"The values of the {chart} chart, merged over its values.yaml ({source})."
    own = str((schema or {}).get("description") or "").strip()
    return {"description": f"{about} {own}" if own else about, **node}


# --- the CRD -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Names:
    kind: str
    plural: str
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = (CATEGORY,)

    def as_dict(self) -> dict[str, Any]:
        names: dict[str, Any] = {
            "kind": self.kind,
            "listKind": f"{self.kind}List",
            "plural": self.plural,
            "singular": self.singular or self.kind.lower(),
        }
        if self.short_names:
            names["shortNames"] = list(self.short_names)
        if self.categories:
            names["categories"] = list(self.categories)
        return names


@dataclass(frozen=True)
class Version:
    name: str
    spec: Mapping[str, Any]  # the schema of spec (see spec_schema)
    storage: bool = False


@dataclass(frozen=True)
class Crd:
    group: str
    names: Names
    description: str
    versions: tuple[Version, ...]
    scope: str = "Namespaced"
    kept_versions: tuple[Mapping[str, Any], ...] = field(default=())  # versions no watch serves

    @property
    def name(self) -> str:
        return f"{self.names.plural}.{self.group}"

    @property
    def file_name(self) -> str:
        return f"{self.name}.yaml"


def render(crd: Crd) -> dict[str, Any]:
    """The CustomResourceDefinition object: status subresource, the operator's printer columns."""
    if sum(v.storage for v in crd.versions) + sum(bool(v.get("storage")) for v in crd.kept_versions) != 1:
        raise ValueError(f"{crd.name}: exactly one version must be the storage version")
    versions: list[dict[str, Any]] = [
        {
            "name": v.name,
            "served": True,
            "storage": v.storage,
            "subresources": {"status": {}},
            "additionalPrinterColumns": [dict(c) for c in PRINTER_COLUMNS],
            "schema": {
                "openAPIV3Schema": {
                    "description": crd.description,
                    "type": "object",
                    "properties": {"spec": dict(v.spec), "status": dict(STATUS_SCHEMA)},
                }
            },
        }
        for v in crd.versions
    ]
    versions += [dict(v) for v in crd.kept_versions]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd.name},
        "spec": {
            "group": crd.group,
            "scope": crd.scope,
            "names": crd.names.as_dict(),
            "versions": versions,
        },
    }


def description_of(kind: str, chart: str, chart_description: str | None) -> str:
    """What ``kubectl explain <plural>`` says about the kind: the chart's own description first."""
    text = (chart_description or "").strip()
    own = f"installed by helm-operator from the {chart} chart."
    if not text:
        return f"A {kind}, {own}"
    return f"{text.rstrip('.')}; {own}"


class _Dumper(yaml.SafeDumper):
    """Block lists indented under their key, as kubectl and most people write them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def dump(doc: Mapping[str, Any], header: Sequence[str] = ()) -> str:
    """YAML the same way every time (key order kept, long lines not folded): diffs stay small and
    the committed files can be compared with a fresh generation."""
    body = yaml.dump(
        dict(doc), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=10_000, allow_unicode=True
    )
    lines = "".join(f"# {line}\n" if line else "#\n" for line in header)
    return lines + body


def without_nulls(values: Mapping[str, Any], at: str = "") -> tuple[dict[str, Any], list[str]]:
    """``values`` without its ``null``s, and the paths left out.

    A client-side ``kubectl apply`` drops ``null`` map values before the API server sees them, so a
    sample carrying them is not what gets stored, and a map holding only ``null``s arrives empty
    (or, edited by hand, as ``null``) where the schema may want properties. Such a map is left out
    too. Nothing is lost: the spec is merged over values.yaml, which still has them.
    """
    out: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in values.items():
        path = f"{at}.{key}" if at else str(key)
        if value is None:
            dropped.append(path)
            continue
        if isinstance(value, Mapping):
            kept, gone = without_nulls(value, path)
            dropped += gone
            if not kept and value:  # emptied by the pruning (an empty map in values.yaml stays)
                dropped[len(dropped) - len(gone) :] = [path]
                continue
            value = kept
        elif isinstance(value, list):
            items = []
            for i, item in enumerate(value):
                if isinstance(item, Mapping):
                    item, gone = without_nulls(item, f"{path}[{i}]")
                    dropped += gone
                items.append(item)
            value = items
        out[str(key)] = value
    return out, dropped


def sample(
    group: str, version: str, kind: str, defaults: Mapping[str, Any], stem: str | None = None
) -> dict[str, Any]:
    """An example resource whose spec is the chart's defaults (but their ``null``s, see
    :func:`without_nulls`): a starting point users edit, which applies as it is. ``stem``: its
    name's start (a second version's sample must not overwrite the first's object)."""
    return {
        "apiVersion": f"{group}/{version}",
        "kind": kind,
        "metadata": {"name": f"{stem or kind.lower()}-sample"},
        "spec": without_nulls(defaults)[0],
    }


@dataclass(frozen=True)
class Identity:
    """What a regeneration keeps from a CRD already on disk: names, scope, storage version and
    versions that no watch serves any more."""

    names: Names
    scope: str
    storage_version: str | None
    versions: tuple[Mapping[str, Any], ...]


def identity_of(doc: Mapping[str, Any]) -> Identity:
    spec = doc.get("spec") or {}
    names = spec.get("names") or {}
    versions = tuple(v for v in spec.get("versions") or [] if isinstance(v, Mapping))
    return Identity(
        names=Names(
            kind=str(names.get("kind", "")),
            plural=str(names.get("plural", "")),
            singular=str(names.get("singular", "")),
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
        ),
        scope=str(spec.get("scope") or "Namespaced"),
        storage_version=next((str(v["name"]) for v in versions if v.get("storage")), None),
        versions=versions,
    )
