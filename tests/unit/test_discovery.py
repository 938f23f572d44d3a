"""API discovery's snapshot: what it finds, and when it asks the server again."""

from __future__ import annotations

from typing import Any

import pytest

from helm_operator.adapters import discovery
from helm_operator.adapters.discovery import Discovery


def _docs(*kinds: tuple[str, str, str]) -> dict[str, dict[str, Any]]:
    """``/api`` and ``/apis`` answering (group, plural, Kind) each in version v1."""

    def group(name: str, resources: list[dict[str, Any]]) -> dict[str, Any]:
        return {"metadata": {"name": name}, "versions": [{"version": "v1", "resources": resources}]}

    def res(plural: str, kind: str) -> dict[str, Any]:
        return {"resource": plural, "responseKind": {"kind": kind}, "scope": "Namespaced", "verbs": ["list"]}

    core = [res(p, k) for g, p, k in kinds if not g]
    named = sorted({g for g, _, _ in kinds if g})
    return {
        "/api": {"items": [group("", core)]},
        "/apis": {"items": [group(n, [res(p, k) for g, p, k in kinds if g == n]) for n in named]},
    }


class Server:
    """What the API server serves now, and how often it was asked."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *kinds: tuple[str, str, str]) -> None:
        self.docs, self.asked = _docs(*kinds), 0
        self.clock = 100.0
        monkeypatch.setattr(discovery, "request_json", self.request)
        monkeypatch.setattr(discovery.time, "monotonic", lambda: self.clock)

    def request(self, api: Any, method: str, path: str, **kw: Any) -> dict[str, Any]:
        self.asked += path == "/apis"
        return self.docs[path]


def test_a_kind_made_since_is_found_by_asking_again_at_most_once_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server(monkeypatch, ("", "pods", "Pod"))
    found = Discovery(api=None, max_age=30)  # type: ignore[arg-type]
    assert found.find("", "v1", "Pod") is not None and server.asked == 1
    server.docs = _docs(("", "pods", "Pod"), ("example.com", "widgets", "Widget"))
    server.clock += 0.5
    assert found.find("example.com", "v1", "Widget") is None and server.asked == 1  # asked 0.5 s ago
    server.clock += 1
    widget = found.find("example.com", "v1", "Widget")
    assert widget is not None and widget.path("ns", "w") == "/apis/example.com/v1/namespaces/ns/widgets/w"
    assert server.asked == 2
    assert found.find("", "v1", "Pod") is not None and server.asked == 2  # the snapshot serves


def test_crd_names_ask_again_only_for_a_name_not_served(monkeypatch: pytest.MonkeyPatch) -> None:
    server = Server(monkeypatch, ("example.com", "widgets", "Widget"), ("", "pods", "Pod"))
    found = Discovery(api=None)  # type: ignore[arg-type]
    assert found.crd_names() == {"widgets.example.com"} and server.asked == 1  # core kinds have no CRD
    server.clock += 2
    assert found.crd_names(["widgets.example.com"]) == {"widgets.example.com"} and server.asked == 1
    assert found.crd_names(["gadgets.example.com"]) == {"widgets.example.com"} and server.asked == 2
