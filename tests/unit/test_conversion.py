"""Converters between API versions (pure), the webhook's certificates, and the hook module's
checks of them."""

from __future__ import annotations

import datetime as dt
import json
import ssl
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from helm_operator.adapters import certs
from helm_operator.hooks import Hooks
from helm_operator.hooks.conversion import (
    ConversionError,
    Kind,
    admission,
    convert,
    differing,
    missing,
    review,
    unreadable,
    way,
)
from helm_operator.hooks.errors import HookLoadError
from helm_operator.hooks.loader import load
from helm_operator.runtime.webhook import Material, WebhookSettings, _renewed, _Server

hooks = Hooks()


@hooks.convert("v1", "v2")
def up(obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"] = {"greeting": {"text": obj["spec"].pop("message")}}
    obj["metadata"]["labels"] = {"converted": "yes"}
    obj["metadata"]["name"] = "renamed"  # not the converter's to change: put back
    return obj


@hooks.convert("v2", "v1")
def down(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["spec"]["greeting"]["text"] == "boom":
        raise ValueError("no v1 form")
    obj["spec"] = {"message": obj["spec"]["greeting"]["text"]}
    return obj


@hooks.convert("v3", "v2")
def three_down(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


KIND = Kind("g.io", "Greeting", "v2", hooks.converters)


def obj(version: str, spec: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "7"}
    return {"apiVersion": f"g.io/{version}", "kind": "Greeting", "metadata": meta, "spec": spec}


def test_a_converter_changes_spec_labels_and_annotations_but_no_other_metadata() -> None:
    out = convert(KIND, obj("v1", {"message": "hi"}), "v2")
    assert out["apiVersion"] == "g.io/v2" and out["spec"] == {"greeting": {"text": "hi"}}
    assert out["metadata"] == {
        "name": "a",
        "namespace": "ns",
        "uid": "u1",
        "resourceVersion": "7",
        "labels": {"converted": "yes"},
    }
    assert convert(KIND, out, "v1")["spec"] == {"message": "hi"}


def test_ways_through_the_hub_and_the_pairs_start_up_refuses() -> None:
    assert way(KIND, "v3", "v1") == [("v3", "v2"), ("v2", "v1")]
    assert way(KIND, "v2", "v2") == []
    assert way(KIND, "v1", "v3") is None
    assert missing(KIND, ["v1", "v2", "v3"]) == [("v1", "v3"), ("v2", "v3")]
    assert missing(KIND, ["v1", "v2"]) == []


def test_a_failing_converter_fails_the_review_naming_object_and_converter() -> None:
    with pytest.raises(
        ConversionError,
        match=r"Greeting ns/a: converter v2 -> v1 \(down, test_conversion.py:\d+\) failed: ValueError: no v1",
    ):
        convert(KIND, obj("v2", {"greeting": {"text": "boom"}}), "v1")
    body = {
        "request": {
            "uid": "r1",
            "desiredAPIVersion": "g.io/v1",
            "objects": [obj("v2", {"greeting": {"text": "x"}}), obj("v2", {"greeting": {"text": "boom"}})],
        }
    }
    answer = review({("g.io", "Greeting"): KIND}, body)["response"]
    assert (
        answer["uid"] == "r1" and answer["result"]["status"] == "Failure" and answer["convertedObjects"] == []
    )
    assert "no v1 form" in answer["result"]["message"]
    other = review({}, {"request": {"uid": "r2", "desiredAPIVersion": "x.io/v1", "objects": [{"kind": "X"}]}})
    assert "converts no X of group 'x.io'" in other["response"]["result"]["message"]


def test_a_converter_failing_inside_a_library_is_located_in_its_own_module() -> None:
    def up(o: dict[str, Any]) -> dict[str, Any]:
        o["spec"] = json.loads(o["metadata"]["annotations"]["kept"])  # the line named
        return o

    def lazy(o: dict[str, Any]) -> dict[str, Any]:
        o["spec"] = {}
        return None  # type: ignore[return-value]

    kind = Kind("g.io", "Greeting", "v2", {("v1", "v2"): up, ("v2", "v1"): lazy})
    line = up.__code__.co_firstlineno + 1
    broken = {**obj("v1", {}), "metadata": {"name": "a", "annotations": {"kept": "not json"}}}
    with pytest.raises(ConversionError, match=rf"\(up, test_conversion.py:{line}\) failed: JSONDecodeError"):
        convert(kind, broken, "v2")
    with pytest.raises(
        ConversionError, match=r"\(lazy, test_conversion.py:\d+\) returned NoneType, not the object"
    ):
        convert(kind, obj("v2", {}), "v1")


def test_converters_must_be_plain_functions_of_one_argument(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from helm_operator.hooks import Hooks\nhooks = Hooks()\n"
        "@hooks.convert('v1', 'v2')\nasync def up(obj):\n    return obj\n"
    )
    with pytest.raises(HookLoadError, match=r"convert v1 -> v2 up: a converter is a plain `def`"):
        load(str(bad), tmp_path)
    with pytest.raises(ValueError, match="already declared"):
        hooks.convert("v1", "v2")(up)


NOW = dt.datetime(2026, 11, 27, tzinfo=dt.UTC)
SETTINGS = WebhookSettings(bind=("127.0.0.1", 0), secret_namespace="ops", service=("ops", "hop", 443))


def test_certificates_are_made_once_renewed_before_expiry_and_a_new_ca_trusted_beside_the_old() -> None:
    first = _renewed(None, SETTINGS.names(), NOW)
    assert first is not None and first.bundle == first.ca.cert
    assert {"hop.ops.svc", "127.0.0.1", "localhost"} <= certs.names_of(first.serving.cert)
    assert _renewed(first, SETTINGS.names(), NOW + dt.timedelta(days=300)) is None
    due = _renewed(first, SETTINGS.names(), NOW + dt.timedelta(days=340))
    assert due is not None and due.ca == first.ca and due.serving != first.serving
    late = _renewed(first, SETTINGS.names(), NOW + dt.timedelta(days=3640))
    assert late is not None and late.ca != first.ca and late.bundle == late.ca.cert + first.ca.cert
    assert SETTINGS.client_config(b"pem")["service"]["path"] == "/convert"
    local = WebhookSettings(bind=("0.0.0.0", 9444), secret_namespace="default").client_config(b"pem")
    assert local["url"] == "https://127.0.0.1:9444/convert" and local["service"] is None


def test_the_webhook_answers_a_review_over_tls_with_its_own_ca(tmp_path: Path) -> None:
    m = _renewed(None, ["127.0.0.1"], dt.datetime.now(dt.UTC))
    assert isinstance(m, Material)
    (tmp_path / "c.pem").write_bytes(m.serving.cert)
    (tmp_path / "k.pem").write_bytes(m.serving.key)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    server = _Server(("127.0.0.1", 0), ctx, {("g.io", "Greeting"): KIND})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        trust = ssl.create_default_context(cadata=m.bundle.decode())
        body = {
            "request": {
                "uid": "r1",
                "desiredAPIVersion": "g.io/v2",
                "objects": [obj("v1", {"message": "hi"})],
            }
        }
        request = urllib.request.Request(
            f"https://127.0.0.1:{server.server_address[1]}/convert",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        answer = json.loads(urllib.request.urlopen(request, context=trust, timeout=10).read())
        assert answer["response"]["convertedObjects"][0]["spec"] == {"greeting": {"text": "hi"}}
    finally:
        server.shutdown()
        server.server_close()


def test_the_harness_round_trips_the_sample_converters_without_loss() -> None:
    from helm_operator.hooks.testing import converted, load, round_trip

    sample = load(str(Path(__file__).parents[1] / "e2e/hooks/greeting_versions.py"), Path("."))
    v2 = {
        "apiVersion": "conv.test.helm-operator.io/v2",
        "kind": "Greeting",
        "metadata": {"name": "a", "annotations": {"team": "x"}},
        "spec": {"greeting": {"text": "hi", "emphasis": True}},
    }
    assert round_trip(sample, v2, "v1", hub="v2") == v2
    v1 = converted(sample, v2, "v1", hub="v2")
    assert v1["spec"] == {"message": "hi"} and v1["metadata"]["annotations"]["team"] == "x"
    with pytest.raises(ConversionError, match="has no v1 form"):
        converted(sample, {**v2, "spec": {"greeting": {"text": "boom"}}}, "v1", hub="v2")


def test_served_versions_with_different_schemas_need_converters() -> None:
    schema = {"openAPIV3Schema": {"type": "object"}}
    other = {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object"}}}}
    one = [{"name": "v1", "served": True, "schema": schema}]
    assert differing(one) == []
    same = [*one, {"name": "v2", "served": True, "schema": schema}]
    assert differing(same) == []  # relabelling loses nothing
    changed = [*one, {"name": "v2", "served": True, "schema": other}]
    assert differing(changed) == ["v1", "v2"]
    retired = [*one, {"name": "v0", "served": False, "schema": other}]
    assert differing(retired) == []


def test_a_refused_conversion_is_logged_once_a_minute_however_often_it_is_asked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from helm_operator.runtime import webhook

    server = webhook._Server(("127.0.0.1", 0), ssl.create_default_context(ssl.Purpose.CLIENT_AUTH), {})
    try:
        with caplog.at_level("WARNING", logger=webhook.__name__):
            for _ in range(50):
                server.refused("Greeting ns/a: converter v1 -> v2 (up, greeting.py:12) failed: KeyError")
            server.refused("Greeting ns/b: another failure")
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 2 and "ns/a" in lines[0] and "ns/b" in lines[1], lines
    finally:
        server.server_close()


def test_a_write_that_could_not_be_read_back_in_every_served_version_is_refused() -> None:
    served = {("g.io", "Greeting"): ["v1", "v2"]}

    def ask(o: dict[str, Any], group: str = "g.io") -> dict[str, Any]:
        request = {"uid": "r1", "kind": {"group": group, "version": "v2", "kind": "Greeting"}, "object": o}
        return admission({("g.io", "Greeting"): KIND}, served, {"request": request})["response"]

    assert ask(obj("v2", {"greeting": {"text": "hi"}})) == {"uid": "r1", "allowed": True}
    refused = ask(obj("v2", {"greeting": {"text": "boom"}}))
    assert refused["allowed"] is False and refused["status"]["code"] == 422, refused
    message = refused["status"]["message"]
    assert message.startswith("it could not be read as v1: Greeting ns/a: converter v2 -> v1 (down, ")
    assert "ValueError: no v1 form" in message, message
    # A kind served in one version has nothing else to be read as; a kind it does not convert is
    # not its to judge.
    assert unreadable(KIND, obj("v2", {"greeting": {"text": "boom"}}), ["v2"]) is None
    assert ask(obj("v2", {"greeting": {"text": "boom"}}), group="other.io")["allowed"] is True
    going = obj("v2", {"greeting": {"text": "boom"}})
    going["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    assert ask(going)["allowed"] is True, "an object being deleted may lose its finalizers"
