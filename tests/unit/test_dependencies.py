"""Dependencies between resources: the annotation read, readiness judged, cycles found (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from helm_operator.release.dependencies import (
    Dependency,
    DependencyError,
    Dependents,
    Ref,
    describe_cycle,
    find_cycle,
    parse,
    why_not_ready,
)

DB = Ref("postgresql.example.com/v1alpha1", "PostgreSQLCluster", "apps", "db")


def test_the_annotation_names_objects_of_any_kind_in_any_namespace() -> None:
    text = """
      postgresql.example.com/v1alpha1/PostgreSQLCluster/db:Ready,
      apps/v1/Deployment/proxy   v1/Service/infra/dns
      postgresql.example.com/v1alpha1/PostgreSQLCluster/db:Ready
    """
    assert parse(text, "apps") == (
        Dependency(DB, "Ready"),
        Dependency(Ref("apps/v1", "Deployment", "apps", "proxy")),
        Dependency(Ref("v1", "Service", "infra", "dns")),
    )
    assert parse("v1/Namespace/team-a", None) == (Dependency(Ref("v1", "Namespace", None, "team-a")),)
    assert str(Dependency(DB, "Ready")) == "PostgreSQLCluster/apps/db (Ready)"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("db", "expected <apiVersion>/<Kind>/[<namespace>/]<name>"),
        ("apps/v1/deployment/web", "expected <apiVersion>/<Kind>"),
        ("a/b/c/v1/Deployment/web", "expected <apiVersion>/<Kind>"),
        ("apps/v1/Deployment/ns/x/web", "expected <apiVersion>/<Kind>"),
        ("apps/v1/Deployment/Web", "'Web' is not a valid name"),
        ("apps/v1/Deployment/NS/web", "'NS' is not a valid namespace"),
        ("apps/v1/Deployment/web:Ready Now", "expected <apiVersion>"),
        ("apps/v1/Deployment/web:9x", "'9x' is not a condition type"),
    ],
)
def test_an_unreadable_entry_is_named_with_what_was_expected(text: str, words: str) -> None:
    with pytest.raises(DependencyError) as err:
        parse(text, "apps")
    assert words in str(err.value), str(err.value)


def obj(generation: int = 1, **status: Any) -> dict[str, Any]:
    return {"kind": "PostgreSQLCluster", "metadata": {"generation": generation}, "status": status}


def cond(ctype: str, value: str, reason: str = "Because", generation: int | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"type": ctype, "status": value, "reason": reason}
    if generation is not None:
        c["observedGeneration"] = generation
    return c


def test_readiness_by_kstatus_and_by_a_named_condition() -> None:
    kstatus, named = Dependency(DB), Dependency(DB, "Available")
    assert why_not_ready(kstatus, None) == "not found"
    deleting = {**obj(conditions=[cond("Ready", "True")]), "metadata": {"deletionTimestamp": "x"}}
    assert why_not_ready(kstatus, deleting) == "being deleted"
    assert why_not_ready(kstatus, obj(conditions=[cond("Ready", "True")])) is None
    assert why_not_ready(kstatus, obj()) is None  # no conditions and nothing pending: kstatus says Current
    assert why_not_ready(kstatus, obj(conditions=[cond("Ready", "False", "InstallFailed")])) == (
        "Ready=False (InstallFailed)"
    )
    assert why_not_ready(kstatus, obj(conditions=[cond("Reconciling", "True", "Upgrading")])) == (
        "reconciling (Upgrading)"
    )
    assert why_not_ready(kstatus, obj(conditions=[cond("Stalled", "True", "RenderFailed")])) == (
        "stalled (RenderFailed)"
    )
    stale = obj(generation=3, observedGeneration=2, conditions=[cond("Ready", "True")])
    assert why_not_ready(kstatus, stale) == "its controller has not seen the latest spec"
    deployment = {
        "kind": "Deployment",
        "metadata": {},
        "spec": {"replicas": 2},
        "status": {"availableReplicas": 1},
    }
    assert "1/2 replicas available" in str(why_not_ready(kstatus, deployment))

    assert why_not_ready(named, obj(conditions=[cond("Ready", "True")])) == "has no Available condition yet"
    assert why_not_ready(named, obj(conditions=[cond("Available", "False", "Scaling")])) == (
        "Available=False (Scaling)"
    )
    assert why_not_ready(named, obj(conditions=[cond("Available", "True")])) is None
    old = obj(generation=4, conditions=[cond("Available", "True", generation=3)])
    assert why_not_ready(named, old) == "Available is about an older generation"


def graph(edges: dict[str, list[str]]) -> Any:
    return lambda r: [Ref("v1", "X", "ns", n) for n in edges.get(r.name, [])]


def x(name: str) -> Ref:
    return Ref("v1", "X", "ns", name)


def test_a_cycle_is_found_and_named_and_a_diamond_is_not_one() -> None:
    assert find_cycle(x("a"), graph({"a": ["b"], "b": ["a"]})) == [x("a"), x("b"), x("a")]
    long = find_cycle(x("a"), graph({"a": ["b"], "b": ["c", "d"], "c": [], "d": ["a"]}))
    assert long is not None and describe_cycle(long) == "X/ns/a → X/ns/b → X/ns/d → X/ns/a"
    assert find_cycle(x("a"), graph({"a": ["a"]})) == [x("a"), x("a")]
    assert find_cycle(x("a"), graph({"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": []})) is None
    # A cycle that does not pass through the resource is its members' to report, not its own.
    assert find_cycle(x("a"), graph({"a": ["b"], "b": ["c"], "c": ["b"]})) is None


def test_who_depends_on_a_resource_is_known_until_it_goes() -> None:
    index = Dependents()
    web, api = x("web"), x("api")
    index.record(web, parse("postgresql.example.com/v1alpha1/PostgreSQLCluster/db", "apps"))
    index.record(api, parse("postgresql.example.com/v1alpha1/PostgreSQLCluster/apps/db:Ready", "other"))
    assert index.of(DB) == [api, web]
    index.record(web, ())  # the annotation removed
    assert index.of(DB) == [api]
    index.forget(api)
    assert index.of(DB) == []
