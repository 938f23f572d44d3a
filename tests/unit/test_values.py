from __future__ import annotations

import json
import tarfile
from pathlib import Path

from helm_operator.config.charts import ChartRef, load_chart
from helm_operator.core.values import digest, merge, user_values, validate


def test_maps_merge_deeply_lists_and_scalars_replace() -> None:
    base = {"a": {"b": 1, "c": [1, 2]}, "l": [1, 2, 3], "s": "x"}
    over = {"a": {"c": [9]}, "l": [4], "s": "y", "new": {"k": 1}}
    assert merge(base, over) == {"a": {"b": 1, "c": [9]}, "l": [4], "s": "y", "new": {"k": 1}}
    assert base["l"] == [1, 2, 3]  # inputs untouched


def test_null_removes_a_key() -> None:
    assert merge({"a": 1, "b": {"c": 1, "d": 2}}, {"a": None, "b": {"c": None}}) == {"b": {"d": 2}}


def test_overrides_win_over_spec() -> None:
    assert user_values({"image": "a", "ports": [1, 2]}, {"image": "b", "ports": [3]}) == {
        "image": "b",
        "ports": [3],
    }
    assert user_values(None, {}) == {}


SCHEMA = {
    "type": "object",
    "properties": {
        "replicas": {"type": "integer", "minimum": 0},
        "ports": {"type": "array", "items": {"type": "object", "properties": {"port": {"type": "integer"}}}},
    },
    "required": ["replicas"],
}


def test_schema_violations_name_the_exact_path() -> None:
    found = validate({"replicas": "three", "ports": [{"port": 80}, {"port": "x"}]}, SCHEMA)
    assert [v.path for v in found] == ["spec.ports[1].port", "spec.replicas"]
    assert "'three' is not of type 'integer'" in str(found[1])
    missing = validate({}, SCHEMA)
    assert len(missing) == 1 and "'replicas' is a required property" in missing[0].message
    assert validate({"replicas": 1}, SCHEMA) == []
    assert validate({"anything": 1}, None) == []


def _chart(tmp: Path, version: str = "0.1.0", template: str = "a: 1") -> Path:
    (tmp / "templates").mkdir(parents=True, exist_ok=True)
    (tmp / "Chart.yaml").write_text(f"apiVersion: v2\nname: demo\nversion: {version}\nappVersion: '2.0'\n")
    (tmp / "values.yaml").write_text("replicas: 1\n")
    (tmp / "values.schema.json").write_text(json.dumps(SCHEMA))
    (tmp / "templates" / "cm.yaml").write_text(template)
    return tmp


def test_load_chart_reads_metadata_defaults_and_schema(tmp_path: Path) -> None:
    info = load_chart(ChartRef(ref="x", path=_chart(tmp_path)))
    assert (info.name, info.version, info.app_version) == ("demo", "0.1.0", "2.0")
    assert info.defaults == {"replicas": 1}
    assert info.schema == SCHEMA


def test_digest_is_stable_and_sensitive(tmp_path: Path) -> None:
    chart = load_chart(ChartRef(ref="x", path=_chart(tmp_path / "a")))
    d = digest(chart, {"a": 1, "b": {"c": [1, 2]}})
    assert d == digest(chart, {"b": {"c": [1, 2]}, "a": 1})  # key order does not matter
    assert len(d) == 32 and d.isalnum()
    assert d != digest(chart, {"a": 1, "b": {"c": [2, 1]}})  # list order does
    assert d != digest(chart, {"a": "1", "b": {"c": [1, 2]}})  # types do
    edited = load_chart(ChartRef(ref="x", path=_chart(tmp_path / "b", template="a: 2")))
    assert d != digest(edited, {"a": 1, "b": {"c": [1, 2]}})  # chart content does
    same = load_chart(ChartRef(ref="x", path=_chart(tmp_path / "c")))
    assert d == digest(same, {"a": 1, "b": {"c": [1, 2]}})  # same content elsewhere: same digest


def test_packaged_chart_digest_matches_directory(tmp_path: Path) -> None:
    src = _chart(tmp_path / "demo")
    tgz = tmp_path / "demo-0.1.0.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(src, arcname="demo")
    assert (
        load_chart(ChartRef(ref="d", path=src)).content_digest
        == load_chart(ChartRef(ref="t", path=tgz)).content_digest
    )
