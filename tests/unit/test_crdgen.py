"""CRD generation from charts: schema conversion, inference, names, the CRD's shape, create-api's
files, and the shipped crds/ being exactly what the generator makes of the shipped charts."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tarfile
from itertools import permutations
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from helm_operator.scaffold import crd
from helm_operator.scaffold.create_api import ApiError, Request, create, regenerate

REPO = Path(__file__).resolve().parents[2]
PRESERVE = crd.PRESERVE


def spec_of(schema: dict[str, Any], defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    return crd.convert(schema, defaults or {})


def obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


# --- conversion ----------------------------------------------------------------------------------


def test_types_checks_and_descriptions_carry_over() -> None:
    schema = obj(
        replicas={"type": "integer", "minimum": 1, "maximum": 9, "description": "Pods."},
        name={"type": "string", "minLength": 1, "maxLength": 63, "pattern": "^[a-z]+$"},
        mode={"type": "string", "enum": ["fast", "safe"]},
        ratio={"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5},
        on={"type": "boolean", "default": True},
        tags={"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
    )
    props = spec_of(schema)["properties"]
    assert props["replicas"] == {"description": "Pods.", "type": "integer", "minimum": 1, "maximum": 9}
    assert props["name"] == {"type": "string", "minLength": 1, "maxLength": 63, "pattern": "^[a-z]+$"}
    assert props["mode"] == {"type": "string", "enum": ["fast", "safe"]}
    # draft-07's numeric exclusiveMinimum becomes OpenAPI v3.0's minimum + flag.
    assert props["ratio"] == {"type": "number", "minimum": 0, "exclusiveMinimum": True, "multipleOf": 0.5}
    assert props["on"] == {"type": "boolean", "default": True}
    assert props["tags"] == {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "string"}}


def test_required_is_kept_only_for_what_values_yaml_does_not_set() -> None:
    schema = {
        **obj(
            a={"type": "string"},
            b={"type": "string"},
            nested=obj(x={"type": "integer"}, y={"type": "integer"}),
        ),
        "required": ["a", "b", "nested"],
    }
    schema["properties"]["nested"]["required"] = ["x", "y"]
    out = spec_of(schema, {"a": "set", "nested": {"x": 1}})
    assert out["required"] == ["b"]
    assert out["properties"]["nested"]["required"] == ["y"]
    # Items of a list get no defaults (lists are replaced, not merged): their required stays.
    items = spec_of(
        obj(ports={"type": "array", "items": {**obj(port={"type": "integer"}), "required": ["port"]}})
    )
    assert items["properties"]["ports"]["items"]["required"] == ["port"]


def test_refs_to_definitions_and_defs_are_inlined_with_their_siblings() -> None:
    schema = {
        **obj(
            a={"$ref": "#/definitions/port"},
            b={"$ref": "#/$defs/name", "description": "Overrides the target's."},
            c={"$ref": "#/definitions/a~1b"},
        ),
        "definitions": {"port": {"type": "integer", "maximum": 65535}, "a/b": {"type": "boolean"}},
        "$defs": {"name": {"type": "string", "description": "A name."}},
    }
    props = spec_of(schema)["properties"]
    assert props["a"] == {"type": "integer", "maximum": 65535}
    assert props["b"] == {"description": "Overrides the target's.", "type": "string"}
    assert props["c"] == {"type": "boolean"}


def test_recursive_and_external_refs_become_free_form() -> None:
    schema = {
        **obj(tree={"$ref": "#/definitions/node"}, ext={"$ref": "https://example.com/s.json"}),
        "definitions": {"node": obj(children={"type": "array", "items": {"$ref": "#/definitions/node"}})},
    }
    props = spec_of(schema)["properties"]
    assert props["tree"]["properties"]["children"]["items"][PRESERVE] is True
    assert props["ext"][PRESERVE] is True and "type" not in props["ext"]


def test_a_ref_to_nothing_names_where_it_is() -> None:
    with pytest.raises(
        crd.SchemaError, match=r"#/properties/a/\$ref: '#/definitions/gone' points to nothing"
    ):
        spec_of(obj(a={"$ref": "#/definitions/gone"}))


def test_unions_kubernetes_cannot_type() -> None:
    props = spec_of(
        obj(
            ios={"type": ["string", "integer"], "pattern": "^[0-9]+s?$"},
            ios2={"anyOf": [{"type": "integer"}, {"type": "string"}]},
            maybe={"type": ["string", "null"]},
            qty={"type": ["string", "number"], "pattern": "^[0-9]+Mi$", "minimum": 0},
            either={"oneOf": [obj(a={"type": "string"}), {"type": "string"}]},
            flag={"type": ["boolean", "string"], "enum": [True, False, "true", "false"]},
        )
    )["properties"]
    assert props["ios"] == {"pattern": "^[0-9]+s?$", crd.INT_OR_STRING: True}
    assert props["ios2"] == {crd.INT_OR_STRING: True}
    assert props["maybe"] == {"type": "string", "nullable": True}
    # Untyped but still checked: the API server applies pattern to strings and minimum to numbers.
    assert props["qty"] == {"pattern": "^[0-9]+Mi$", "minimum": 0, PRESERVE: True}
    assert props["either"] == {PRESERVE: True}
    assert props["flag"] == {"enum": [True, False, "true", "false"], PRESERVE: True}


def test_a_nullable_enum_checks_its_values_but_lets_null_through() -> None:
    """The API server refuses null for a nullable field with an enum, even one listing null; the
    same values inside anyOf are checked only on a value that is not null."""
    props = spec_of(
        obj(
            policy={"type": ["string", "null"], "enum": ["Cluster", "Local", None]},
            format={"type": ["string", "null"], "enum": ["json", "text"]},
            level={"enum": ["debug", "info", None]},
            plain={"type": "string", "enum": ["a", "b"]},
        )
    )["properties"]
    assert props["policy"] == {"type": "string", "nullable": True, "anyOf": [{"enum": ["Cluster", "Local"]}]}
    assert props["format"] == {"type": "string", "nullable": True, "anyOf": [{"enum": ["json", "text"]}]}
    assert props["level"] == {"type": "string", "nullable": True, "anyOf": [{"enum": ["debug", "info"]}]}
    assert props["plain"] == {"type": "string", "enum": ["a", "b"]}


def test_a_property_values_yaml_has_as_null_is_not_required() -> None:
    """Helm's merge keeps the key of values.yaml (null), so a spec need not set it."""
    schema = {**obj(tls={"type": ["string", "null"]}, other={"type": "string"}), "required": ["tls", "other"]}
    assert spec_of(schema, {"tls": None})["required"] == ["other"]


def test_samples_leave_out_nulls_and_maps_only_nulls_filled() -> None:
    defaults = {
        "digest": None,
        "tls": {"secretName": None, "minVersion": None},
        "deep": {"a": {"b": None}},
        "image": {"repository": "nginx", "digest": None},
        "labels": {},
        "ports": [{"name": "http", "port": None}],
        "count": 0,
    }
    spec, left_out = crd.without_nulls(defaults)
    assert spec == {"image": {"repository": "nginx"}, "labels": {}, "ports": [{"name": "http"}], "count": 0}
    assert left_out == ["digest", "tls", "deep", "image.digest", "ports[0].port"]
    assert crd.sample("a.example.com", "v1", "A", defaults)["spec"] == spec


def test_union_branches_keep_only_checks_every_applicable_branch_shares() -> None:
    out = spec_of(obj(a={"anyOf": [{"type": "string", "pattern": "^x"}, {"type": "string"}]}))
    assert out["properties"]["a"] == {"type": "string"}
    out = spec_of(obj(a={"anyOf": [{"type": "string", "pattern": "^x"}, {"type": "integer", "minimum": 2}]}))
    assert out["properties"]["a"] == {"pattern": "^x", "minimum": 2, crd.INT_OR_STRING: True}


def test_one_of_that_only_chooses_required_properties_keeps_the_object() -> None:
    schema = {
        **obj(a={"type": "string"}, b={"type": "string"}),
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
    }
    assert spec_of(schema)["properties"] == {"a": {"type": "string"}, "b": {"type": "string"}}


def test_all_of_adds_up_properties_and_required() -> None:
    schema = obj(
        x={"allOf": [{"$ref": "#/definitions/base"}, {**obj(b={"type": "integer"}), "required": ["b"]}]}
    )
    schema["definitions"] = {"base": {**obj(a={"type": "string"}), "required": ["a"]}}
    x = spec_of(schema)["properties"]["x"]
    assert x["properties"] == {"a": {"type": "string"}, "b": {"type": "integer"}}
    assert x["required"] == ["a", "b"]


def test_additional_properties_maps_and_open_objects() -> None:
    props = spec_of(
        obj(
            labels={"type": "object", "additionalProperties": {"type": "string"}},
            free={"type": "object"},
            open={**obj(a={"type": "string"}), "additionalProperties": True},
            closed={**obj(a={"type": "string"}), "additionalProperties": False},
            patterned={"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
        )
    )["properties"]
    assert props["labels"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert props["free"] == {"type": "object", PRESERVE: True}
    assert props["open"] == {"type": "object", "properties": {"a": {"type": "string"}}, PRESERVE: True}
    assert props["closed"] == {"type": "object", "properties": {"a": {"type": "string"}}}
    assert props["patterned"] == {"type": "object", PRESERVE: True}


def test_keywords_kubernetes_rejects_are_dropped() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "https://example.com/values",
        "title": "Values",
        **obj(
            a={"type": "array", "items": [{"type": "string"}], "additionalItems": False, "uniqueItems": True},
            b={"const": "only", "examples": ["only"], "$comment": "c"},
            c={"type": "string", "format": "my-format", "readOnly": True},
            d={"type": "string", "format": "date-time"},
            e={
                "type": "object",
                "propertyNames": {"pattern": "^[a-z]+$"},
                "if": {"required": ["x"]},
                "then": {"required": ["y"]},
                "additionalProperties": {"type": "string"},
            },
            f={"type": "string", "x-kubernetes-validations": [{"rule": "self != ''"}]},
        ),
    }
    out = spec_of(schema)
    assert set(out) == {"description", "type", "properties"}  # the title describes when nothing else does
    props = out["properties"]
    assert props["a"] == {"type": "array", "items": {PRESERVE: True}}  # tuple items: unchecked
    assert props["b"] == {"type": "string", "enum": ["only"]}  # const → enum of one
    assert props["c"] == {"type": "string"}
    assert props["d"] == {"type": "string", "format": "date-time"}
    assert props["e"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert props["f"]["x-kubernetes-validations"] == [{"rule": "self != ''"}]


def test_values_yaml_keys_the_schema_leaves_out_are_inferred() -> None:
    out = spec_of(obj(a={"type": "string"}), {"a": "x", "extra": 3, "more": {"k": True}})
    assert out["properties"]["extra"] == {"type": "integer"}
    assert out["properties"]["more"] == {"type": "object", "properties": {"k": {"type": "boolean"}}}


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (obj(a={"type": "strin"}), "#/properties/a/type: unknown type 'strin'"),
        (obj(a={"type": "object", "properties": ["x"]}), "#/properties/a/properties: expected a mapping"),
        (obj(a={"type": "object", "required": "x"}), "#/properties/a/required: expected a list"),
        (obj(a=3), "#/properties/a: expected a schema object, got int"),
        ({"type": "string"}, "#/type: the root of a values schema must describe an object"),
    ],
)
def test_unreadable_schemas_name_the_place(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(crd.SchemaError) as exc:
        spec_of(schema)
    assert message in str(exc.value)


# --- inference -----------------------------------------------------------------------------------


def test_inference_from_values_yaml() -> None:
    values = {
        "replicaCount": 1,
        "ratio": 0.5,
        "name": "x",
        "enabled": False,
        "nothing": None,
        "empty": {},
        "list": [],
        "ports": [{"port": 80}, {"port": 81, "name": "b"}],
        "args": ["--a"],
        "podAnnotations": {"a": "b"},
        "resources": {"limits": {"cpu": "1"}},
        "tolerations": [{"key": "k"}],
        "service": {"type": "ClusterIP", "port": 80},
    }
    props = crd.infer(values)["properties"]
    assert props["replicaCount"] == {"type": "integer"}
    assert props["ratio"] == {"type": "number"}
    assert props["name"] == {"type": "string"}
    assert props["enabled"] == {"type": "boolean"}
    assert props["nothing"] == {"nullable": True, PRESERVE: True}
    assert props["empty"] == {"type": "object", PRESERVE: True}
    assert props["list"] == {"type": "array", "items": {PRESERVE: True}}
    assert props["ports"]["items"]["properties"] == {"port": {"type": "integer"}, "name": {"type": "string"}}
    assert props["args"] == {"type": "array", "items": {"type": "string"}}
    assert props["podAnnotations"] == {"type": "object", PRESERVE: True}  # keys are the user's
    assert props["resources"] == {"type": "object", PRESERVE: True}
    assert props["tolerations"] == {"type": "array", "items": {PRESERVE: True}}
    assert props["service"] == obj(type={"type": "string"}, port={"type": "integer"})


def test_spec_schema_says_where_it_comes_from() -> None:
    inferred = crd.spec_schema(None, {"a": 1}, "demo")
    assert inferred["description"].startswith("The values of the demo chart")
    assert "inferred from the chart's values.yaml" in inferred["description"]
    converted = crd.spec_schema({**obj(a={"type": "integer"}), "description": "Demo."}, {}, "demo")
    assert converted["description"].endswith("values.schema.json). Demo.")
    assert crd.spec_schema(None, {}, "demo")[PRESERVE] is True


# --- names and the CRD ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "plural"),
    [
        ("Nginx", "nginxes"),
        ("Memcached", "memcacheds"),
        ("AppService", "appservices"),
        ("Policy", "policies"),
        ("Gateway", "gateways"),
        ("StorageClass", "storageclasses"),
        ("Box", "boxes"),
        ("Batch", "batches"),
        ("Mesh", "meshes"),
        ("RedisEnterpriseCluster", "redisenterpriseclusters"),
        # The last word is its own plural: uncountable, or plural already.
        ("KubeStateMetrics", "kubestatemetrics"),
        ("WebAnalytics", "webanalytics"),
        ("CacheData", "cachedata"),
        ("ProxySettings", "proxysettings"),
        ("MetricsServer", "metricsservers"),  # only the last word decides
    ],
)
def test_plural(kind: str, plural: str) -> None:
    assert crd.plural_of(kind) == plural


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("example", "v1", "A", "as"), "--group"),
        (("a.example.com", "V1", "A", "as"), "--version"),
        (("a.example.com", "v1", "lower", "lowers"), "--kind"),
        (("a.example.com", "v1", "A", "A_s"), "--plural"),
    ],
)
def test_names_the_api_server_would_refuse_name_the_flag(args: tuple[str, str, str, str], flag: str) -> None:
    with pytest.raises(ValueError, match=f"^{flag}:"):
        crd.check_names(*args)
    with pytest.raises(ValueError, match=r"^--short-name:"):
        crd.check_names("a.example.com", "v1", "A", "as", ["Bad"])


def test_crd_shape() -> None:
    spec = crd.spec_schema(obj(size={"type": "integer"}), {}, "demo")
    definition = crd.Crd(
        group="demo.example.com",
        names=crd.Names("Demo", "demos", short_names=("dm",)),
        description="A Demo.",
        versions=(crd.Version("v1", spec, storage=True),),
        scope="Cluster",
    )
    doc = crd.render(definition)
    assert doc["metadata"]["name"] == "demos.demo.example.com" == definition.name
    assert definition.file_name == "demos.demo.example.com.yaml"
    assert doc["spec"]["scope"] == "Cluster"
    assert doc["spec"]["names"] == {
        "kind": "Demo",
        "listKind": "DemoList",
        "plural": "demos",
        "singular": "demo",
        "shortNames": ["dm"],
        "categories": ["helm-operator"],
    }
    (version,) = doc["spec"]["versions"]
    assert version["served"] and version["storage"] and version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Ready",
        "Reason",
        "Revision",
        "Chart",
        "Age",
    ]
    root = version["schema"]["openAPIV3Schema"]
    assert root["description"] == "A Demo." and root["type"] == "object"
    assert root["properties"]["spec"]["properties"] == {"size": {"type": "integer"}}
    assert root["properties"]["status"] == {
        "description": crd.STATUS_SCHEMA["description"],
        "type": "object",
        PRESERVE: True,
    }
    with pytest.raises(ValueError, match="exactly one version must be the storage version"):
        crd.render(crd.Crd("demo.example.com", crd.Names("Demo", "demos"), "", (crd.Version("v1", spec),)))
    again = crd.identity_of(yaml.safe_load(crd.dump(doc, ["a header"])))
    assert (
        again.names == crd.Names("Demo", "demos", "demo", ("dm",))
        and again.scope == "Cluster"
        and again.storage_version == "v1"
    )


# --- the shipped CRDs ----------------------------------------------------------------------------


def test_shipped_crds_are_exactly_what_the_charts_generate() -> None:
    """crds/ can never drift from charts/: regenerate with `helm-operator create-api --regenerate-crd`."""
    outcome = regenerate(REPO, check=True)
    assert outcome.written == [], (
        f"out of date (run helm-operator create-api --regenerate-crd): {outcome.written}"
    )
    kinds = {w["kind"] for w in yaml.safe_load((REPO / "watches.yaml").read_text())}
    assert len(outcome.unchanged) == len(kinds) == len(list((REPO / "crds").glob("*.yaml")))


def _as_json_schema(node: Any) -> Any:
    """A CRD schema as JSON Schema draft 4 (OpenAPI v3.0's boolean exclusiveMinimum), with what the
    API server adds: unknown fields refused unless preserved, int-or-string."""
    if isinstance(node, list):
        return [_as_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _as_json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if "properties" in node:
        out["properties"] = {k: _as_json_schema(v) for k, v in node["properties"].items()}
    if node.get("type") == "object" and "additionalProperties" not in node and not node.get(PRESERVE):
        out["additionalProperties"] = False
    if node.get(crd.INT_OR_STRING):
        out["type"] = ["integer", "string"]
    if node.get("nullable") and "type" in out:
        out["type"] = [*([out["type"]] if isinstance(out["type"], str) else out["type"]), "null"]
    if node.get("nullable") and "anyOf" in out:  # the API server checks anyOf on non-null values
        out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    return out


@pytest.mark.parametrize("sample", sorted(p.name for p in (REPO / "samples").glob("*.yaml")))
def test_every_sample_is_valid_for_its_crd(sample: str) -> None:
    doc = yaml.safe_load((REPO / "samples" / sample).read_text())
    group, version = doc["apiVersion"].split("/")
    for path in (REPO / "crds").glob("*.yaml"):
        definition = yaml.safe_load(path.read_text())
        if (definition["spec"]["group"], definition["spec"]["names"]["kind"]) == (group, doc["kind"]):
            (served,) = [v for v in definition["spec"]["versions"] if v["name"] == version]
            spec = served["schema"]["openAPIV3Schema"]["properties"]["spec"]
            jsonschema.Draft4Validator(_as_json_schema(spec)).validate(doc.get("spec") or {})
            bad = copy.deepcopy(doc.get("spec") or {})
            bad["surelyNotAField"] = 1
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.Draft4Validator(_as_json_schema(spec)).validate(bad)
            return
    raise AssertionError(f"no CRD in crds/ for {doc['kind']} ({group})")


# --- create-api files ----------------------------------------------------------------------------


def write_chart(path: Path, values: dict[str, Any], schema: dict[str, Any] | None = None) -> Path:
    (path / "templates").mkdir(parents=True)
    (path / "Chart.yaml").write_text(
        f"apiVersion: v2\nname: {path.name}\nversion: 0.1.0\ndescription: A demo.\n"
    )
    (path / "values.yaml").write_text(yaml.safe_dump(values))
    if schema is not None:
        (path / "values.schema.json").write_text(json.dumps(schema))
    return path


def test_create_writes_chart_watch_sample_and_crd(tmp_path: Path) -> None:
    chart = write_chart(
        tmp_path / "src", {"size": 2}, {**obj(size={"type": "integer", "minimum": 1}), "required": ["size"]}
    )
    project = tmp_path / "project"
    (project).mkdir()
    (project / "watches.yaml").write_text(
        "# mine\n- {group: a.example.com, version: v1, kind: Other, chart: src}\n"
    )
    (project / "src").symlink_to(chart)
    out = create(Request("demo.example.com", "v1", "Demo", str(chart), project=project, short_names=("dm",)))
    assert [p.relative_to(project).as_posix() for p in out.written] == [
        "charts/demo",
        "watches.yaml",
        "samples/demo.yaml",
        "crds/demos.demo.example.com.yaml",
    ]
    assert (project / "charts/demo/values.schema.json").is_file()
    watches = (project / "watches.yaml").read_text()
    assert watches.startswith("# mine\n") and watches.endswith(
        "\n- group: demo.example.com\n  version: v1\n  kind: Demo\n  chart: charts/demo\n"
    )
    sample = yaml.safe_load((project / "samples/demo.yaml").read_text())
    assert sample == {
        "apiVersion": "demo.example.com/v1",
        "kind": "Demo",
        "metadata": {"name": "demo-sample"},
        "spec": {"size": 2},
    }
    doc = yaml.safe_load((project / "crds/demos.demo.example.com.yaml").read_text())
    assert doc["spec"]["names"]["shortNames"] == ["dm"]
    spec = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["size"] == {"type": "integer", "minimum": 1} and "required" not in spec
    assert regenerate(project, check=True).unchanged == [project / "crds/demos.demo.example.com.yaml"]


def test_create_refuses_a_duplicate_and_writes_nothing_on_error(tmp_path: Path) -> None:
    chart = write_chart(tmp_path / "src", {"size": 2})
    create(Request("demo.example.com", "v1", "Demo", str(chart), project=tmp_path / "p"))
    before = {p: p.read_bytes() for p in (tmp_path / "p").rglob("*") if p.is_file()}
    with pytest.raises(ApiError, match=r"watches.yaml: entry 0 already serves demo.example.com/v1 Demo"):
        create(Request("demo.example.com", "v1", "Demo", str(chart), project=tmp_path / "p"))
    bad = write_chart(tmp_path / "bad", {}, obj(a={"type": "strin"}))
    with pytest.raises(ApiError, match=r"bad/values.schema.json: #/properties/a/type: unknown type 'strin'"):
        create(Request("bad.example.com", "v1", "Bad", str(bad), project=tmp_path / "p"))
    with pytest.raises(
        ApiError, match=r"--chart: no chart directory or .tgz at nowhere; a chart name needs --repo"
    ):
        create(Request("x.example.com", "v1", "X", "nowhere", project=tmp_path / "p"))
    with pytest.raises(ApiError, match="--release-namespace"):
        create(Request("x.example.com", "v1", "X", str(chart), project=tmp_path / "p", cluster_scoped=True))
    assert {p: p.read_bytes() for p in (tmp_path / "p").rglob("*") if p.is_file()} == before


def test_a_second_version_joins_the_crd_and_the_storage_version_stays(tmp_path: Path) -> None:
    one = write_chart(tmp_path / "one", {"a": 1})
    two = write_chart(tmp_path / "two", {"a": 1, "b": "x"})
    project = tmp_path / "p"
    create(Request("demo.example.com", "v1", "Demo", str(one), project=project, plural="demoz"))
    (project / "watches.yaml").write_text("# our kinds\n" + (project / "watches.yaml").read_text())
    outcome = create(Request("demo.example.com", "v2", "Demo", str(two), project=project))
    # One entry per kind: v2 now feeds the chart (the hub); comments and other fields kept.
    text = (project / "watches.yaml").read_text()
    entries = yaml.safe_load(text)
    assert text.startswith("# our kinds") and len(entries) == 1, text
    assert entries[0]["version"] == "v2" and entries[0]["chart"] == "charts/demo-v2", entries
    assert entries[0]["plural"] == "demoz"
    (note,) = outcome.notes
    assert "stores v1" in note and "@hooks.convert" in note and "charts/demo" in note, note
    assert "add hooks: hooks/demo.py to the entry" in note, note  # the entry names no module yet
    doc = yaml.safe_load((project / "crds/demoz.demo.example.com.yaml").read_text())
    assert doc["spec"]["names"]["plural"] == "demoz"
    served = {v["name"]: v for v in doc["spec"]["versions"]}
    assert {n: (v["served"], v["storage"]) for n, v in served.items()} == {
        "v1": (True, True),
        "v2": (True, False),
    }
    v2 = served["v2"]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert v2 == {"a": {"type": "integer"}, "b": {"type": "string"}}
    # Its own object: applying both samples does not overwrite the v1 one.
    assert (
        yaml.safe_load((project / "samples/demo-v2.yaml").read_text())["metadata"]["name"] == "demo-v2-sample"
    )
    assert yaml.safe_load((project / "samples/demo.yaml").read_text())["metadata"]["name"] == "demo-sample"


CONVERTERS = """from helm_operator.hooks import Hooks

hooks = Hooks()
{body}
"""


def converter(source: str, target: str) -> str:
    name = f"{source}_to_{target}"
    return f'\n@hooks.convert("{source}", "{target}")\ndef {name}(obj: dict) -> dict:\n    return obj\n'


def test_a_third_version_names_every_converter_still_missing_from_the_hook_module(tmp_path: Path) -> None:
    charts = [write_chart(tmp_path / f"c{i}", {"a": 1, f"x{i}": i}) for i in range(3)]
    project = tmp_path / "p"
    create(Request("demo.example.com", "v1", "Demo", str(charts[0]), project=project))
    (note,) = create(Request("demo.example.com", "v2", "Demo", str(charts[1]), project=project)).notes
    assert "the CRD serves v1, v2 and stores v1" in note and "for v1 -> v2, v2 -> v1 (" in note, note
    (project / "hooks").mkdir()
    module = project / "hooks/demo.py"
    module.write_text(CONVERTERS.format(body=converter("v1", "v2") + converter("v2", "v1")))
    text = (project / "watches.yaml").read_text()
    (project / "watches.yaml").write_text(text + "  hooks: hooks/demo.py\n")
    # v3 the hub: v1 and v2 each need their own way to and from v3; the module's v1 <-> v2 does not help.
    (note,) = create(Request("demo.example.com", "v3", "Demo", str(charts[2]), project=project)).notes
    assert "the CRD serves v1, v2, v3 and stores v1" in note, note
    assert "its hook module hooks/demo.py for v1 -> v3, v2 -> v3, v3 -> v1, v3 -> v2 (" in note, note
    module.write_text(
        CONVERTERS.format(body="".join(converter(a, b) for a, b in permutations(("v1", "v2", "v3"), 2)))
    )
    assert missing_note(project, "v4", charts[0]).endswith(
        "for v1 -> v4, v2 -> v4, v3 -> v4, v4 -> v1, v4 -> v2, v4 -> v3 (each served version to and from the "
        "watch's version, v4): until then the operator refuses to start, naming them "
        "(docs/api-versions.md). v3's chart stays in charts/demo-v3 until you remove it"
    )


def missing_note(project: Path, version: str, chart: Path) -> str:
    (note,) = create(Request("demo.example.com", version, "Demo", str(chart), project=project)).notes
    return str(note)


def test_without_a_module_only_the_pairs_with_the_new_hub_are_asked_for(tmp_path: Path) -> None:
    charts = [write_chart(tmp_path / f"c{i}", {"a": 1, f"x{i}": i}) for i in range(3)]
    project = tmp_path / "p"
    for i, chart in enumerate(charts):
        outcome = create(Request("demo.example.com", f"v{i + 1}", "Demo", str(chart), project=project))
    (note,) = outcome.notes
    assert "for v1 -> v3, v2 -> v3, v3 -> v1, v3 -> v2 (" in note, note  # v1 <-> v2 goes through v3


def test_a_module_with_every_converter_is_said_to_convert(tmp_path: Path) -> None:
    one, two = write_chart(tmp_path / "one", {"a": 1}), write_chart(tmp_path / "two", {"b": 1})
    project = tmp_path / "p"
    create(Request("demo.example.com", "v1", "Demo", str(one), project=project))
    (project / "hooks").mkdir()
    (project / "hooks/demo.py").write_text(
        CONVERTERS.format(body=converter("v1", "v2") + converter("v2", "v1"))
    )
    (project / "watches.yaml").write_text((project / "watches.yaml").read_text() + "  hooks: hooks/demo.py\n")
    (note,) = create(Request("demo.example.com", "v2", "Demo", str(two), project=project)).notes
    assert "its hook module hooks/demo.py converts between every served version and v2." in note, note
    assert "refuses" not in note, note


def test_a_new_version_keeps_the_kind_as_its_crd_has_it_or_is_refused(tmp_path: Path) -> None:
    one, two = write_chart(tmp_path / "one", {"a": 1}), write_chart(tmp_path / "two", {"b": 1})
    project = tmp_path / "p"
    create(Request("demo.example.com", "v1", "Demo", str(one), project=project))
    create(Request("demo.example.com", "v2", "Demo", str(two), project=project))
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    crd_file = project / "crds/demos.demo.example.com.yaml"
    with pytest.raises(ApiError, match=rf"{crd_file}: Demo already serves v1; create-api --version adds"):
        create(Request("demo.example.com", "v1", "Demo", str(one), project=project))
    with pytest.raises(ApiError, match=r"--plural demoz: Demo is served as demos .* leave --plural out"):
        create(Request("demo.example.com", "v3", "Demo", str(one), project=project, plural="demoz"))
    with pytest.raises(ApiError, match=r"--cluster-scoped: Demo is Namespaced .* leave --cluster-scoped out"):
        create(
            Request(
                "demo.example.com", "v3", "Demo", str(one), project=project, cluster_scoped=True,
                release_namespace="x",
            )
        )  # fmt: skip
    assert {p: p.read_bytes() for p in project.rglob("*") if p.is_file()} == before
    crd_file.unlink()
    with pytest.raises(
        ApiError, match=r"crds: no CRD file defines Demo \(demo.example.com\), so the versions"
    ):
        create(Request("demo.example.com", "v3", "Demo", str(one), project=project))


def test_a_packaged_chart_is_unpacked(tmp_path: Path) -> None:
    src = write_chart(tmp_path / "pkg", {"a": True})
    archive = tmp_path / "pkg-0.1.0.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname="pkg")
    create(Request("demo.example.com", "v1", "Demo", str(archive), project=tmp_path / "p"))
    assert yaml.safe_load((tmp_path / "p/charts/demo/values.yaml").read_text()) == {"a": True}


def test_regenerate_notices_a_changed_chart_and_keeps_names(tmp_path: Path) -> None:
    chart = write_chart(tmp_path / "src", {"a": 1})
    project = tmp_path / "p"
    create(Request("demo.example.com", "v1", "Demo", str(chart), project=project, short_names=("dm",)))
    (project / "charts/demo/values.yaml").write_text("a: 1\nb: true\n")
    assert [p.name for p in regenerate(project, check=True).written] == ["demos.demo.example.com.yaml"]
    assert "b:" not in (project / "crds/demos.demo.example.com.yaml").read_text()  # check writes nothing
    regenerate(project)
    doc = yaml.safe_load((project / "crds/demos.demo.example.com.yaml").read_text())
    assert doc["spec"]["names"]["shortNames"] == ["dm"]
    assert "b" in doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "helm_operator.cli", "create-api", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_cli_exit_codes_and_messages(tmp_path: Path) -> None:
    proc = cli("--group", "demo.example.com", "--project-dir", str(tmp_path))
    assert proc.returncode == 2 and "missing --version, --kind, --chart" in proc.stderr
    proc = cli("--regenerate-crd", "--kind", "A", "--project-dir", str(tmp_path))
    assert proc.returncode == 2 and "drop --kind" in proc.stderr
    chart = write_chart(tmp_path / "src", {"a": 1})
    args = ("--group", "demo.example.com", "--version", "v1", "--kind", "Demo", "--chart", str(chart))
    proc = cli(*args, "--project-dir", str(tmp_path / "p"))
    assert proc.returncode == 0 and f"wrote {tmp_path / 'p/crds/demos.demo.example.com.yaml'}" in proc.stdout
    proc = cli(*args, "--project-dir", str(tmp_path / "p"))
    assert proc.returncode == 2 and "already serves demo.example.com/v1 Demo" in proc.stderr
    assert cli("--regenerate-crd", "--check", "--project-dir", str(tmp_path / "p")).returncode == 0
    (tmp_path / "p/charts/demo/values.yaml").write_text("a: x\n")
    proc = cli("--regenerate-crd", "--check", "--project-dir", str(tmp_path / "p"))
    assert proc.returncode == 1 and "out of date" in proc.stdout
    proc = cli(
        "--group", "r.example.com", "--version", "v1", "--kind", "R", "--chart", "oci://x/y",
        "--project-dir", str(tmp_path / "p"), "--helm", "/nonexistent/helm",
    )  # fmt: skip
    assert proc.returncode == 2 and "--helm: no helm executable '/nonexistent/helm'" in proc.stderr


def test_a_cluster_scoped_kind(tmp_path: Path) -> None:
    chart = write_chart(tmp_path / "src", {"a": 1})
    project = tmp_path / "p"
    req = Request("demo.example.com", "v1", "Policy", str(chart), project=project, cluster_scoped=True)
    create(Request(**{**req.__dict__, "release_namespace": "policies"}))
    doc = yaml.safe_load((project / "crds/policies.demo.example.com.yaml").read_text())
    assert doc["spec"]["scope"] == "Cluster"
    entry = yaml.safe_load((project / "watches.yaml").read_text())[0]
    assert entry["scope"] == "Cluster" and entry["releaseNamespace"] == "policies"
    regenerate(project)  # the scope comes back from the watches entry
    assert yaml.safe_load((project / "crds/policies.demo.example.com.yaml").read_text()) == doc
