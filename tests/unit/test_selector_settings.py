"""A watch's selector is kopf's server-side label selector for that resource (and only that one)."""

from __future__ import annotations

from pathlib import Path

import kopf
from kopf._cogs.structs import references

from helm_operator.config.watches import load_watches, resolve
from helm_operator.runtime.handlers import configure


def test_each_watch_selector_filters_its_own_kind_on_the_api_server(tmp_path: Path) -> None:
    chart = tmp_path / "app"
    chart.mkdir()
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: app\nversion: 0.1.0\n")
    (tmp_path / "watches.yaml").write_text(
        "- {group: a.example.com, version: v1, kind: App, chart: app,\n"
        "   selector: {matchLabels: {shard: one}, matchExpressions: [{key: tier, operator: Exists}]}}\n"
        "- {group: a.example.com, version: v1, kind: Other, chart: app}\n"
    )
    settings = kopf.OperatorSettings()
    app, other = load_watches(tmp_path / "watches.yaml")
    configure(settings, [resolve(app, "apps", True), resolve(other, "others", True)])

    def selectors(plural: str) -> list[str]:
        resource = references.Resource(group="a.example.com", version="v1", plural=plural, namespaced=True)
        return list(settings.watching.label_selectors.collect(resource))

    assert selectors("apps") == ["shard=one,tier"]
    assert selectors("others") == []  # no selector: everything of that kind
    assert selectors("pods") == []
