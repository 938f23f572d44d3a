from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from helm_operator.config.watches import (
    WatchesError,
    expand_env,
    load_watches,
    parse_duration,
    resolve,
    selector_matches,
    selector_query,
)


@pytest.fixture
def chart_dir(tmp_path: Path) -> Path:
    chart = tmp_path / "charts" / "app"
    chart.mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: app\nversion: 0.1.0\n")
    return chart


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "watches.yaml"
    path.write_text(text)
    return path


def test_operator_sdk_format_loads_unchanged(tmp_path: Path, chart_dir: Path) -> None:
    path = write(
        tmp_path,
        """
- group: cache.example.com
  version: v1alpha1
  kind: Memcached
  chart: charts/app
  watchDependentResources: false
  overrideValues:
    image: $IMAGE_REPO/memcached:${TAG}
  selector:
    matchLabels: {tier: cache}
  reconcilePeriod: 1m30s
  maxConcurrentReconciles: 3
""",
    )
    [w] = load_watches(path, env={"IMAGE_REPO": "quay.io/x", "TAG": "1.6"})
    assert (w.group, w.version, w.kind, w.plural, w.scope) == (
        "cache.example.com",
        "v1alpha1",
        "Memcached",
        None,  # plural and scope come from API discovery, not from a guess
        None,
    )
    assert w.chart.path == chart_dir.resolve()
    assert w.override_values == {"image": "quay.io/x/memcached:1.6"}
    assert w.reconcile_period == 90.0 and w.max_concurrent_reconciles == 3
    assert w.watch_dependent_resources is False
    assert (w.history_max, w.rollback_on_failure, w.wait) == (5, True, True)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            "  version: v1\n  kind: A\n  chart: charts/app\n  bogus: 1",
            "entry 0: field 'bogus': unknown field",
        ),
        ("  version: v1\n  chart: charts/app", "entry 0: field 'kind': required field is missing"),
        ("  version: v1\n  kind: A\n  chart: charts/nope", "entry 0: field 'chart': no chart directory"),
        (
            "  version: v1\n  kind: A\n  chart: charts/app\n  reconcilePeriod: soon",
            "field 'reconcilePeriod': expected a duration",
        ),
        (
            "  version: v1\n  kind: A\n  chart: charts/app\n"
            "  selector: {matchExpressions: [{key: a, operator: Is}]}",
            "field 'selector': matchExpressions[0].operator: expected one of In, NotIn",
        ),
        (
            "  version: v1\n  kind: A\n  chart: charts/app\n  maxConcurrentReconciles: 0",
            "field 'maxConcurrentReconciles': expected an integer >= 1",
        ),
        (
            "  version: v1\n  kind: A\n  chart: charts/app\n  overrideValues: {a: $UNSET_VAR}",
            "field 'overrideValues': a: environment variable $UNSET_VAR is not set",
        ),
        (
            "  version: v1\n  kind: A\n  chart: charts/app\n  scope: Cluster",
            "field 'releaseNamespace': a cluster-scoped kind needs",
        ),
        (
            "  version: v1\n  kind: A\n  chart: oci://registry.example/charts/app",
            "field 'chartVersion': a remote chart (oci://registry.example/charts/app) needs a pinned",
        ),
        (
            "  version: v1\n  kind: A\n  chart: charts/app\n  driftTrustedManagers: [helm]",
            "field 'driftTrustedManagers': 'helm' is the manager drift corrections use",
        ),
        (
            "  version: v1\n  kind: A\n  chart: charts/app\n  driftIgnore: [{path: spec/replicas}]",
            "field 'driftIgnore[0]': expected {path: /json/pointer",
        ),
        (
            "  version: v1\n  kind: A\n  chart: charts/app\n  upgrade: {rollbackOnFailure: maybe}",
            "field 'upgrade.rollbackOnFailure': expected true or false",
        ),
    ],
)
def test_invalid_entries_name_file_entry_and_field(
    tmp_path: Path, chart_dir: Path, entry: str, expected: str
) -> None:
    path = write(tmp_path, "- group: g\n" + entry + "\n")
    with pytest.raises(WatchesError) as err:
        load_watches(path, env={})
    assert str(err.value).startswith(str(path))
    assert expected in str(err.value)


def test_duplicate_gvk_is_rejected(tmp_path: Path, chart_dir: Path) -> None:
    one = "- {group: g, version: v1, kind: A, chart: charts/app}\n"
    with pytest.raises(WatchesError, match=r"entry 1: field 'kind': duplicate group/version/kind g/v1 A"):
        load_watches(write(tmp_path, one * 2))


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(WatchesError, match="cannot read the file"):
        load_watches(tmp_path / "missing.yaml")
    with pytest.raises(WatchesError, match="invalid YAML"):
        load_watches(write(tmp_path, "- [unclosed"))
    with pytest.raises(WatchesError, match="expected a non-empty list"):
        load_watches(write(tmp_path, "{}"))


def test_chart_dir_without_chart_yaml(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(WatchesError, match=r"directory without Chart\.yaml"):
        load_watches(write(tmp_path, "- {version: v1, kind: A, chart: empty}\n"))


def test_parse_duration() -> None:
    assert parse_duration("1h2m3s") == 3723
    assert parse_duration("250ms") == 0.25
    assert parse_duration(30) == 30
    for bad in ("", "5", "1d", "m5", "-1s", True, None):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_expand_env_walks_nested_values() -> None:
    assert expand_env({"a": ["$X", {"b": "${X}-y"}], "n": 1}, {"X": "v"}) == {
        "a": ["v", {"b": "v-y"}],
        "n": 1,
    }


def test_resolve_takes_plural_and_scope_from_the_server(chart_dir: Path) -> None:
    path = chart_dir.parent.parent / "watches.yaml"
    path.write_text(
        "- {group: monitoring.example.com, version: v1, kind: KubeStateMetrics, chart: charts/app}\n"
    )
    [w] = load_watches(path)
    r = resolve(w, "kubestatemetrics", namespaced=True)
    assert (r.plural, r.scope, r.served_plural) == ("kubestatemetrics", "Namespaced", "kubestatemetrics")
    with pytest.raises(WatchesError, match="field 'releaseNamespace': KubeStateMetrics is cluster-scoped"):
        resolve(w, "kubestatemetrics", namespaced=False)
    path.write_text(
        "- {group: g.example.com, version: v1, kind: Policy, chart: charts/app, plural: policys}\n"
    )
    [w] = load_watches(path)
    with pytest.raises(WatchesError, match=r"entry 0: field 'plural': Policy is served as 'policies'"):
        resolve(w, "policies", namespaced=True)
    assert resolve(replace(w, plural="policies"), "policies", True).plural == "policies"


def test_selector_matches() -> None:
    sel = {
        "matchLabels": {"a": "1"},
        "matchExpressions": [
            {"key": "b", "operator": "In", "values": ["x", "y"]},
            {"key": "c", "operator": "DoesNotExist"},
        ],
    }
    assert selector_matches(sel, {"a": "1", "b": "x"})
    assert not selector_matches(sel, {"a": "1", "b": "z"})
    assert not selector_matches(sel, {"a": "1", "b": "x", "c": ""})
    assert not selector_matches(sel, {"b": "x"})
    assert selector_matches({}, {})


def test_a_selector_goes_to_the_api_server_with_the_same_meaning() -> None:
    sel = {
        "matchLabels": {"tier": "web", "app.kubernetes.io/part-of": "shop"},
        "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod", "dev"]},
            {"key": "canary", "operator": "NotIn", "values": ["true"]},
            {"key": "team", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"},
        ],
    }
    assert selector_query(sel) == (
        "app.kubernetes.io/part-of=shop,tier=web,env in (dev,prod),canary notin (true),team,!legacy"
    )
    assert selector_query({}) == ""


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("{matchLabels: {tier: 'a,b'}}", r"matchLabels.tier: 'a,b' is not a label value"),
        ("{matchLabels: {'bad key': x}}", r"'bad key' is not a label name"),
        ("{matchLabels: {'Ex_ample.com/x': y}}", r"the prefix 'Ex_ample.com' is not a DNS subdomain"),
        (
            "{matchExpressions: [{key: env, operator: In, values: [prod, 'de v']}]}",
            r"matchExpressions\[0\].values\[1\]: 'de v' is not a label value",
        ),
    ],
)
def test_a_selector_the_api_server_would_refuse_is_a_config_error(
    tmp_path: Path, chart_dir: Path, selector: str, message: str
) -> None:
    path = write(
        tmp_path,
        f"- {{group: g.example.com, version: v1, kind: App, chart: charts/app, selector: {selector}}}\n",
    )
    with pytest.raises(WatchesError, match=message):
        load_watches(path)
