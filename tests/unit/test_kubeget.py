"""The in-process ``kubectl get -o json``: which forms it serves, and which resource a name means
(over the kinds ``adapters.discovery`` reads from aggregated discovery)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helm_operator.adapters.discovery import served
from helm_operator.dev.kubeget import InProcessGet, Query, parse, resolve


def test_the_plain_forms_are_parsed() -> None:
    assert parse(["get", "podinfos", "p1", "-n", "ns", "-o", "json"]) == Query("podinfos", "p1", "ns")
    assert parse(["get", "deploy/web", "--namespace=ns", "-ojson"]) == Query("deploy", "web", "ns")
    assert parse(["get", "secrets", "-A", "-l", "owner=helm", "--output", "json"]) == Query(
        "secrets", None, None, all_namespaces=True, labels="owner=helm"
    )
    assert parse(
        ["get", "events", "-n", "x", "--field-selector", "involvedObject.name=a", "-o=json"]
    ) == Query("events", None, "x", fields="involvedObject.name=a")


@pytest.mark.parametrize(
    "args",
    [
        ["get", "pods", "-n", "x"],  # a table, not JSON
        ["get", "pods", "-n", "x", "-o", "jsonpath={.items}"],
        ["get", "pods", "-n", "x", "-o", "name"],
        ["get", "pods,services", "-n", "x", "-o", "json"],  # several kinds
        ["get", "pods", "a", "b", "-n", "x", "-o", "json"],  # several names
        ["get", "deploy/web", "other", "-o", "json"],
        ["get", "pods", "-n", "x", "-o", "json", "--show-managed-fields"],  # a flag not known here
        ["get", "pods", "-w", "-o", "json"],
        ["apply", "-f", "-"],
        ["get", "-o", "json"],
    ],
)
def test_anything_else_is_left_to_kubectl(args: list[str]) -> None:
    assert parse(args) is None


def _group(name: str, *versions: tuple[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "versions": [{"version": v, "resources": r} for v, r in versions]}


def _res(
    plural: str, kind: str, singular: str = "", short: tuple[str, ...] = (), scope: str = "Namespaced"
) -> Any:
    return {
        "resource": plural,
        "responseKind": {"kind": kind},
        "singularResource": singular or kind.lower(),
        "shortNames": list(short),
        "scope": scope,
    }


DISCOVERED = served(
    [
        {
            "items": [
                _group(
                    "", ("v1", [_res("events", "Event", short=("ev",)), _res("pods", "Pod", short=("po",))])
                )
            ]
        },
        {
            "items": [
                _group("events.k8s.io", ("v1", [_res("events", "Event", short=("ev",))])),
                _group("apps", ("v1", [_res("deployments", "Deployment", short=("deploy",))])),
                _group(
                    "example.com",
                    ("v2", [_res("greetings", "Greeting", short=("gr",))]),
                    ("v1", [_res("greetings", "Greeting", short=("gr",))]),
                ),
                _group("other.io", ("v1", [_res("greetings", "Greeting")])),
                _group("stuff.io", ("v1", [_res("widgets", "Widget", scope="Cluster")])),
            ]
        },
    ]
)


@pytest.mark.parametrize(
    ("typed", "group", "version"),
    [
        ("pods", "", "v1"),
        ("Pod", "", "v1"),
        ("po", "", "v1"),
        ("events", "", "v1"),  # the core group first, as kubectl
        ("events.events.k8s.io", "events.k8s.io", "v1"),
        ("deploy", "apps", "v1"),
        ("deployments.apps", "apps", "v1"),
        ("greetings.example.com", "example.com", "v2"),  # the group's preferred version
        ("greetings.v1.example.com", "example.com", "v1"),
        ("gr", "example.com", "v2"),  # a short name only one group gives
        ("greetings.other.io", "other.io", "v1"),
        ("widget", "stuff.io", "v1"),
    ],
)
def test_a_name_means_the_resource_kubectl_would_pick(typed: str, group: str, version: str) -> None:
    found = resolve(DISCOVERED, typed)
    assert found is not None and (found.group, found.version) == (group, version)


@pytest.mark.parametrize("typed", ["greetings", "Greeting", "nothings", "greetings.v3.example.com"])
def test_an_unknown_or_ambiguous_name_is_left_to_kubectl(typed: str) -> None:
    # Two groups serve greetings and neither is core: kubectl's own priorities decide.
    assert resolve(DISCOVERED, typed) is None


def test_discovery_gives_each_kind_its_names_and_marks_the_preferred_version() -> None:
    greetings = [k for k in DISCOVERED if k.group == "example.com"]
    assert [(k.version, k.preferred) for k in greetings] == [("v2", True), ("v1", False)]
    assert greetings[0].names == {"greetings", "greeting", "gr"}
    assert greetings[0].verbs == frozenset()  # none listed: none assumed


def test_paths_of_namespaced_and_cluster_scoped_resources() -> None:
    pods, widget = resolve(DISCOVERED, "pods"), resolve(DISCOVERED, "widgets")
    assert pods is not None and widget is not None
    assert pods.path("ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert pods.path(None, None) == "/api/v1/pods"
    assert widget.path("ns", "w") == "/apis/stuff.io/v1/widgets/w"  # -n means nothing to it
    assert widget.api_version == "stuff.io/v1"


def test_a_kubeconfig_that_cannot_be_loaded_is_left_to_kubectl(tmp_path: Path) -> None:
    """A cluster being removed keeps its kubeconfig a moment after its certificates are gone."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1',"
        " certificate-authority: /nonexistent/ca.crt}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    assert InProcessGet(kubeconfig).answer(["get", "pods", "-n", "x", "-o", "json"], 5, check=True) is None
