"""The pure half of ``helm-operator diff``: what counts as a change, which Helm action, the report
(unified diffs, summary, JSON), Secret masking, reading the resource file, and what the user's
``kubectl apply`` of it sends (checked against requests kubectl v1.36.3 sent, logged with ``-v=8``)."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from helm_operator.cli.diff import InputError, parse_resources
from helm_operator.config.charts import ChartRef
from helm_operator.config.watches import IgnoreRule, Watch
from helm_operator.drift.diff import HELM_RELEASE_NAME
from helm_operator.preview.kubectl import (
    LAST_APPLIED,
    client_side_create,
    client_side_patch,
    go_json,
    last_applied_config,
    original_config,
    with_last_applied,
)
from helm_operator.preview.plan import (
    ObjectChange,
    ResourcePreview,
    compare,
    deleted,
    hook_notes,
    object_key,
    objects_of,
    release_plan,
    removed,
    resource_view,
    three_way_patch,
)
from helm_operator.preview.report import (
    SECRET_CHANGED,
    SECRET_MASK,
    change_diff,
    masked,
    report_json,
    report_text,
    summary,
    unified,
)
from helm_operator.release.record import StoredRelease
from helm_operator.release.state import Action, ReleaseState

NS = "shop"


def deployment(replicas: int = 2, image: str = "web:1") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NS, "labels": {"app": "web"}},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "app", "image": image}]}},
        },
    }


def live_of(obj: dict[str, Any], **meta: Any) -> dict[str, Any]:
    """``obj`` as the API server returns it: bookkeeping metadata and a status."""
    out = copy.deepcopy(obj)
    out["metadata"].update(
        {
            "uid": "u-1",
            "resourceVersion": "42",
            "generation": 3,
            "managedFields": [{"manager": "helm"}],
            **meta,
        }
    )
    out["status"] = {"readyReplicas": obj.get("spec", {}).get("replicas")}
    return out


def secret(**data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": NS},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def preview(**kw: Any) -> ResourcePreview:
    fields: dict[str, Any] = {
        "api_version": "shop.example/v1",
        "kind": "Shop",
        "namespace": NS,
        "name": "web",
        "before": {"spec": {"replicas": 2}},
        "after": {"spec": {"replicas": 2}},
        "release": f"{NS}/web",
        "action": "nothing",
        "reason": "release matches the desired chart and values",
    }
    fields.update(kw)
    return ResourcePreview(**fields)


# --- what is a change ------------------------------------------------------------------------------


def test_an_absent_object_would_be_created_as_the_dry_run_returned_it() -> None:
    want = deployment()
    expected = live_of(want)
    change = compare(want, expected, None, NS)
    assert change is not None
    assert (change.action, change.ref, change.before, change.after) == (
        "create",
        f"Deployment/{NS}/web",
        None,
        expected,
    )


def test_bookkeeping_and_status_are_not_changes() -> None:
    want = deployment()
    live = live_of(want, resourceVersion="7", generation=9)
    expected = live_of(want)
    expected["status"] = {"readyReplicas": 0}
    assert compare(want, expected, live, NS) is None


def test_a_changed_field_is_named_by_its_path() -> None:
    live = live_of(deployment(replicas=5))
    change = compare(deployment(), live_of(deployment(replicas=2)), live, NS)
    assert change is not None
    assert change.action == "update"
    assert change.paths == ("/spec/replicas",)


def test_ignore_rules_hide_what_the_drift_check_leaves_alone() -> None:
    live = live_of(deployment(replicas=5))
    expected = live_of(deployment(replicas=2))
    hpa = [IgnoreRule("/spec/replicas", kind="Deployment", name="web")]
    assert compare(deployment(), expected, live, NS, hpa) is None
    other = [IgnoreRule("/spec/replicas", kind="Deployment", name="api")]
    assert compare(deployment(), expected, live, NS, other) is not None


def test_objects_the_new_revision_drops_are_deleted_unless_kept() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "old"}}
    kept = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "keep", "annotations": {"helm.sh/resource-policy": "keep"}},
    }
    moved = {"apiVersion": "apps/v1beta1", "kind": "Deployment", "metadata": {"name": "web"}}
    previous = [cm, kept, moved]
    rendered = [deployment()]  # apps/v1 now: the same object for Helm (group, kind, namespace, name)
    assert removed(previous, rendered, NS) == [cm]
    assert object_key(moved, NS) == object_key(deployment(), NS) == ("apps", "Deployment", NS, "web")
    gone = deleted(live_of(cm), NS)
    assert (gone.action, gone.ref, gone.after) == ("delete", f"ConfigMap/{NS}/old", None)


def test_rendered_objects_carry_helms_ownership_metadata() -> None:
    manifest = "---\n# Source: x\n\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"
    [doc] = objects_of(manifest, "rel", NS)
    assert doc["metadata"]["annotations"][HELM_RELEASE_NAME] == "rel"
    assert doc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


def test_a_three_way_merge_deletes_what_the_new_revision_drops() -> None:
    old = deployment()
    pod = old["spec"]["template"]["spec"]
    pod["nodeSelector"] = {"disk": "ssd"}
    pod["containers"][0].update(
        env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        ports=[{"containerPort": 80}, {"containerPort": 81}],
        resources={"limits": {"cpu": "1"}},
    )
    pod["containers"].append({"name": "sidecar", "image": "proxy:1"})
    new = deployment(replicas=3)
    new["spec"]["template"]["spec"]["containers"][0].update(
        env=[{"name": "A", "value": "1"}], ports=[{"containerPort": 80}]
    )
    patch = three_way_patch(old, new, strategic=True)
    spec = patch["spec"]["template"]["spec"]
    assert patch["spec"]["replicas"] == 3
    assert spec["nodeSelector"] is None
    app, gone = spec["containers"]
    assert gone == {"name": "sidecar", "$patch": "delete"}
    assert app["resources"] is None
    assert app["env"] == [{"name": "A", "value": "1"}, {"name": "B", "$patch": "delete"}]
    assert app["ports"] == [{"containerPort": 80}, {"containerPort": 81, "$patch": "delete"}]
    assert new["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]  # a copy


def test_a_json_merge_patch_replaces_lists_whole() -> None:
    old = {"spec": {"hosts": ["a", "b"], "tls": {"secret": "x"}, "backends": [{"name": "a"}]}}
    new = {"spec": {"hosts": ["a"], "backends": []}}
    assert three_way_patch(old, new, strategic=False) == {
        "spec": {"hosts": ["a"], "backends": [], "tls": None}
    }


# --- which Helm action ------------------------------------------------------------------------------


def stored(
    status: str = "deployed", digest: str = "d1", owner: str | None = "o1", ever: bool = True
) -> StoredRelease:
    return StoredRelease("web", NS, 3, status, owner=owner, digest=digest, ever_deployed=ever)


@pytest.mark.parametrize(
    ("release", "state", "action"),
    [
        (None, ReleaseState.ABSENT, Action.INSTALL),
        (stored(), ReleaseState.IN_SYNC, Action.NOTHING),
        (stored(digest="old"), ReleaseState.OUT_OF_SYNC, Action.UPGRADE),
        (stored(owner="someone"), ReleaseState.UNMANAGED, Action.NOTHING),
        (stored("failed", ever=False), ReleaseState.FAILED, Action.REINSTALL),
        (stored("failed"), ReleaseState.FAILED, Action.ROLLBACK),
        (stored("failed", digest="old"), ReleaseState.FAILED, Action.UPGRADE),
    ],
)
def test_the_helm_action_is_the_operators(
    release: StoredRelease | None, state: ReleaseState, action: Action
) -> None:
    assert release_plan(release, "d1", "o1", rollback_on_failure=True)[0] is state
    assert release_plan(release, "d1", "o1", rollback_on_failure=True)[1].action is action


def test_a_stuck_release_is_planned_as_the_operator_sees_it_once_unlocked() -> None:
    state, p = release_plan(stored("pending-upgrade", digest="old"), "d1", "o1", rollback_on_failure=True)
    assert state is ReleaseState.FAILED
    assert p.action is Action.UPGRADE  # interrupted: straight to the desired values, no rollback
    assert p.reason.startswith("release is stuck in pending-upgrade; once unlocked: ")


def test_only_the_hooks_an_action_fires_are_mentioned() -> None:
    hooks = [
        {"kind": "Job", "name": "migrate", "events": ["pre-upgrade", "pre-install"]},
        {"kind": "Job", "name": "cleanup", "events": ["post-delete"]},
    ]
    assert hook_notes(hooks, "upgrade") == ["Helm hooks would run: Job/migrate (pre-upgrade)"]
    assert hook_notes(hooks, "nothing") == []


# --- the report ---------------------------------------------------------------------------------------


def test_a_unified_diff_per_object_with_live_and_desired_headers() -> None:
    change = compare(deployment(), live_of(deployment(replicas=3)), live_of(deployment(replicas=2)), NS)
    assert change is not None
    text = change_diff(change)
    lines = text.splitlines()
    assert lines[:2] == [f"--- live/Deployment/{NS}/web", f"+++ desired/Deployment/{NS}/web"]
    edits = [line for line in lines[2:] if line[:1] in "+-"]
    assert edits == ["-  replicas: 2", "+  replicas: 3"]
    assert "managedFields" not in text and "resourceVersion" not in text and "status" not in text


def test_a_cluster_scoped_object_is_named_without_namespace() -> None:
    change = ObjectChange("create", "v1", "Namespace", None, "team", after={"kind": "Namespace"})
    assert change.ref == "Namespace/team"
    assert unified(change.ref, None, {"a": 1}).splitlines()[:3] == [
        "--- live/Namespace/team",
        "+++ desired/Namespace/team",
        "@@ -0,0 +1 @@",
    ]


def test_secret_values_never_show_only_whether_they_change() -> None:
    live = live_of(secret(user="admin", password="hunter22"))
    live["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(secret(password="hunter22"))}
    want = live_of(secret(user="admin", password="s3cr3t!!", token="new-token"))
    want["metadata"]["annotations"] = live["metadata"]["annotations"]  # the dry-run keeps kubectl's copy
    before, after = masked(live, want)
    assert before is not None and after is not None
    assert before["data"] == {"user": SECRET_MASK, "password": SECRET_MASK}
    assert after["data"] == {"user": SECRET_MASK, "password": SECRET_CHANGED, "token": SECRET_CHANGED}
    change = compare(secret(), want, live, NS)
    assert change is not None and set(change.paths) == {"/data/password", "/data/token"}
    text = report_text([preview(action="upgrade", changes=(change,))])
    for plain in ("hunter22", "s3cr3t!!", "new-token", "admin"):
        assert plain not in text and base64.b64encode(plain.encode()).decode() not in text
    assert f"+  password: '{SECRET_CHANGED}'" in text


def test_strings_that_look_secret_in_the_values_are_masked_everywhere() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": NS}}
    live = live_of({**cm, "data": {"url": "db://app:old-pass@db"}})
    want = live_of({**cm, "data": {"url": "db://app:new-pass@db"}})
    change = compare(cm, want, live, NS)
    assert change is not None
    p = preview(
        before={"spec": {"dbPassword": "old-pass"}},
        after={"spec": {"dbPassword": "new-pass"}},
        action="upgrade",
        changes=(change,),
        secrets=({"dbPassword": "new-pass"}, {"dbPassword": "old-pass"}),
    )
    for report in (report_text([p]), report_json([p])):
        assert "old-pass" not in report and "new-pass" not in report
        assert "******" in report


def test_resource_view_is_what_the_apply_sets() -> None:
    cr = {
        "apiVersion": "shop.example/v1",
        "kind": "Shop",
        "metadata": {
            "name": "web",
            "uid": "u",
            "labels": {"tier": "a"},
            "annotations": {LAST_APPLIED: "{}"},
            "finalizers": ["x"],
        },
        "spec": {"replicas": 1},
        "status": {"conditions": []},
    }
    assert resource_view(cr) == {"metadata": {"labels": {"tier": "a"}}, "spec": {"replicas": 1}}
    assert resource_view(None) is None


def test_an_unchanged_resource_without_helm_action_or_object_changes_changes_nothing() -> None:
    p = preview()
    assert (p.state, p.changed) == ("unchanged", False)
    assert summary([p]) == "Summary: no changes (1 resource up to date)"
    text = report_text([p])
    assert text.splitlines()[0].startswith(f"# Shop/{NS}/web: unchanged; no Helm action for release {NS}/web")
    assert "---" not in text


def test_live_drift_counts_as_a_change_that_the_operator_reverts() -> None:
    change = compare(deployment(), live_of(deployment(replicas=2)), live_of(deployment(replicas=5)), NS)
    assert change is not None
    p = preview(changes=(change,))
    assert p.changed
    assert summary([p]) == ("Summary: resources: unchanged; objects: 0 to create, 1 to change, 0 to delete")


def test_differences_nothing_reverts_are_notes_not_changes() -> None:
    change = compare(deployment(), live_of(deployment(replicas=2)), live_of(deployment(replicas=5)), NS)
    assert change is not None
    p = preview(uncorrected=(change,), notes=("drift mode is 'warn'; live differences stay",))
    assert not p.changed
    text = report_text([p])
    assert f"# note: Deployment/{NS}/web differs at /spec/replicas; it would stay so" in text
    assert "replicas: 5" not in text


def test_a_new_resource_shows_its_spec_and_the_install() -> None:
    create = compare(deployment(), live_of(deployment()), None, NS)
    assert create is not None
    p = preview(
        before=None, after={"spec": {"replicas": 2}}, action="install", reason="release does not exist"
    )
    p = preview(**{**p.__dict__, "changes": (create,)})
    assert (p.state, p.changed) == ("new", True)
    text = report_text([p])
    assert (
        f"# Shop/{NS}/web: new resource; release {NS}/web would be installed (release does not exist)" in text
    )
    assert "+  replicas: 2" in text
    assert f"# Deployment/{NS}/web would be created" in text
    assert text.rstrip().splitlines()[-1] == (
        "Summary: resources: 1 new; objects: 1 to create, 0 to change, 0 to delete; releases: 1 to install"
    )
    doc = json.loads(report_json([p]))
    assert doc["changed"] is True
    assert doc["summary"] == {"objects": {"create": 1, "update": 0, "delete": 0}, "releases": {"install": 1}}
    [res] = doc["resources"]
    assert (res["state"], res["release"]["action"], res["changes"][0]["action"]) == (
        "new",
        "install",
        "create",
    )
    assert res["changes"][0]["diff"].startswith(f"--- live/Deployment/{NS}/web")


# --- the resource file ----------------------------------------------------------------------------------

WATCH = Watch("shop.example", "v1", "Shop", ChartRef("charts/shop"))
OTHER = Watch("", "v1", "Thing", ChartRef("charts/thing"))


def test_resources_are_matched_to_their_watch_and_namespace() -> None:
    text = (
        "apiVersion: shop.example/v1\nkind: Shop\nmetadata: {name: a}\nspec: {replicas: 1}\n---\n"
        "---\napiVersion: v1\nkind: Thing\nmetadata: {name: b, namespace: x}\n"
    )
    found = parse_resources("crs.yaml", text, [WATCH, OTHER], None)
    assert [(w.watch.kind, w.doc["metadata"]["name"], w.namespace, w.where) for w in found] == [
        ("Shop", "a", "", "crs.yaml: document 1"),
        ("Thing", "b", "x", "crs.yaml: document 3"),
    ]
    assert parse_resources("crs.yaml", text, [WATCH, OTHER], "x")[0].namespace == "x"


def test_a_resource_in_another_served_version_is_converted_to_the_watch_s_as_the_webhook_would() -> None:
    from helm_operator.hooks.conversion import Kind

    def up(obj: dict[str, Any]) -> dict[str, Any]:
        obj["spec"] = {"size": obj["spec"].pop("replicas")}
        return obj

    def down(obj: dict[str, Any]) -> dict[str, Any]:
        if obj["spec"]["size"] > 9:
            raise ValueError("size over 9 has no v0 form")
        obj["spec"] = {"replicas": obj["spec"].pop("size")}
        return obj

    kinds = {
        ("shop.example", "Shop"): Kind("shop.example", "Shop", "v1", {("v0", "v1"): up, ("v1", "v0"): down})
    }
    text = "apiVersion: shop.example/v0\nkind: Shop\nmetadata: {name: a}\nspec: {replicas: 3}\n"
    (found,) = parse_resources("crs.yaml", text, [WATCH], None, kinds)
    assert found.watch is WATCH and found.doc["apiVersion"] == "shop.example/v1"
    assert found.doc["spec"] == {"size": 3} and found.doc["metadata"]["name"] == "a"
    with pytest.raises(InputError, match=r"document 1: Shop a: no converter from v2 to v1"):
        parse_resources("crs.yaml", text.replace("/v0", "/v2"), [WATCH], None, kinds)
    with pytest.raises(InputError, match=r"crs.yaml: document 1: .*converter v0 -> v1 \(up, .*KeyError"):
        parse_resources("crs.yaml", text.replace("replicas", "count"), [WATCH], None, kinds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: [\n", "crs.yaml: invalid YAML: "),
        ("- a\n- b\n", "crs.yaml: document 1: expected a Kubernetes object (a mapping), got list"),
        ("kind: Shop\nmetadata: {name: a}\n", "crs.yaml: document 1: field 'apiVersion': required"),
        (
            "apiVersion: shop.example/v1\nkind: Shop\n",
            "crs.yaml: document 1: field 'metadata.name': required",
        ),
        (
            "apiVersion: shop.example/v1\nkind: Shop\nmetadata: {name: a}\nspec: [1]\n",
            "crs.yaml: document 1: field 'spec': expected a mapping, got list",
        ),
        (
            "apiVersion: shop.example/v2\nkind: Shop\nmetadata: {name: a}\n",
            "crs.yaml: document 1: field 'kind': no watch serves Shop (shop.example/v2); "
            "watched: Shop (shop.example/v1)",
        ),
        (
            "apiVersion: shop.example/v1\nkind: Shop\nmetadata: {name: a, namespace: y}\n",
            "crs.yaml: document 1: field 'metadata.namespace': 'y' does not match the namespace given ('x')",
        ),
        ("# nothing\n", "crs.yaml: no resources in the file"),
    ],
)
def test_a_bad_resource_file_is_named_with_document_and_field(text: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        parse_resources("crs.yaml", text, [WATCH], "x")
    assert str(err.value).startswith(message)


def test_the_command_reports_a_bad_file_before_any_cluster_is_contacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from helm_operator.cli.main import build_parser

    monkeypatch.setenv("KUBECONFIG", "/nonexistent")  # no cluster: never reached
    chart = Path(__file__).resolve().parents[2] / "tests/e2e/charts/tiny"
    watches = tmp_path / "watches.yaml"
    watches.write_text(f"- {{group: shop.example, version: v1, kind: Shop, chart: {chart}}}\n")
    crs = tmp_path / "crs.yaml"
    for text, message in (
        ("apiVersion: shop.example/v1\nkind: Shop\nmetadata: {name: a\n", f"{crs}: invalid YAML: "),
        (
            "apiVersion: v1\nkind: Shop\nmetadata: {name: a}\n",
            f"{crs}: document 1: field 'kind': no watch serves",
        ),
    ):
        crs.write_text(text)
        args = build_parser().parse_args(["-v", "diff", "-f", str(crs), "--watches-file", str(watches)])
        assert args.func(args) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert err.startswith(f"helm-operator diff: {message}")


# --- what kubectl apply sends ---------------------------------------------------------------------
# The expected requests below are kubectl v1.36.3's own (``kubectl apply -v=8``; one object applied
# again and again), for a CRD with nullable (``nn``, ``m.nn``), non-nullable (``plain``,
# ``m.keep``) and free-form (``free``) fields.


def nully(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "x.io/v1",
        "kind": "Nully",
        "metadata": {"name": "e", "namespace": "default", **meta},
        "spec": spec,
    }


def live_nully(spec: dict[str, Any], applied: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    """As the API server returns it: bookkeeping, and the annotation of the last client-side apply."""
    obj = nully(spec, uid="u-1", resourceVersion="7", generation=3, **meta)
    if applied is not None:
        annotations = {**obj["metadata"].get("annotations", {}), LAST_APPLIED: last_applied_config(applied)}
        obj["metadata"]["annotations"] = annotations
    obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    return obj


def without_copy(patch: dict[str, Any]) -> dict[str, Any]:
    """The patch without the new copy of the file (its own test checks the copy)."""
    out = copy.deepcopy(patch)
    out.get("metadata", {}).get("annotations", {}).pop(LAST_APPLIED, None)
    return out


def test_the_last_applied_copy_is_written_as_kubectl_writes_it() -> None:
    doc = nully(
        {
            "nn": None,
            "m": {"nn": None, "keep": "k"},
            "free": {"x": None, "deep": {"a": None, "b": [3], "c": {"d": None}}, "s": "a<b&c>d"}
            | {"f": 1.5, "g": 0.0000001, "u": "é"},
        },
        annotations={"z": "<&>"},
    )
    assert last_applied_config(doc) == (
        '{"apiVersion":"x.io/v1","kind":"Nully","metadata":{"annotations":{"z":"\\u003c\\u0026\\u003e"},'
        '"name":"e","namespace":"default"},"spec":{"free":{"deep":{"a":null,"b":[3],"c":{"d":null}},'
        '"f":1.5,"g":1e-7,"s":"a\\u003cb\\u0026c\\u003ed","u":"é","x":null},"m":{"keep":"k","nn":null},'
        '"nn":null}}\n'
    )
    assert '"metadata":{"annotations":{},"name":"e"' in last_applied_config(nully({}))
    annotated = with_last_applied(doc)["metadata"]["annotations"]
    assert annotated == {"z": "<&>", LAST_APPLIED: last_applied_config(doc)}


@pytest.mark.parametrize(
    ("number", "text"),
    [
        *[(1.0, "1"), (1.5, "1.5"), (1e-7, "1e-7"), (1e-6, "0.000001"), (-0.25, "-0.25")],
        *[(1e16, "10000000000000000"), (1e21, "1e+21"), (12345678901234567890, "12345678901234567000")],
        (-(2**63), "-9223372036854775808"),
    ],
)
def test_numbers_are_written_as_go_writes_them(number: float, text: str) -> None:
    """Go's shortest form, and an integer beyond int64 as the float64 kubectl decoded it into."""
    assert go_json(number) == text


def test_a_client_side_create_sends_no_null_but_keeps_them_in_its_copy() -> None:
    doc = nully(
        {"nn": None, "plain": None, "m": {"nn": None, "plain": None, "keep": "k"}}
        | {"free": {"x": None, "yy": 1, "z": {"w": None}, "l": [1, None, {"a": None}]}}
    )
    sent = client_side_create(doc)
    assert sent["spec"] == {"m": {"keep": "k"}, "free": {"yy": 1, "z": {}, "l": [1, None, {}]}}
    assert sent["metadata"]["annotations"] == {LAST_APPLIED: last_applied_config(doc)}
    assert doc["spec"]["nn"] is None  # the file is not changed


# (the last applied file, the live object, the file, kubectl's patch without the new copy)
APPLIES: dict[str, tuple[dict[str, Any] | None, dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    "nulls-delete-what-was-applied": (
        nully({"m": {"keep": "k2"}, "nn": "nv"}),
        live_nully({"m": {"keep": "k2"}, "nn": "nv"}),
        nully({"nn": None, "m": {"keep": None, "nn": None}, "free": {"x": None}}),
        {
            "metadata": {"annotations": {}},
            "spec": {"free": {"x": None}, "m": {"keep": None, "nn": None}, "nn": None},
        },
    ),
    "the-same-nulls-again-send-nothing": (
        nully({"nn": None, "m": {"keep": None, "nn": None}, "free": {"x": None}}),
        live_nully({"free": {}, "m": {}}),
        nully({"nn": None, "m": {"keep": None, "nn": None}, "free": {"x": None}}),
        {},
    ),
    "new-values-lose-their-nulls": (
        nully({"nn": None, "m": {"keep": None, "nn": None}, "free": {"x": None}}),
        live_nully({"free": {}, "m": {}}),
        nully(
            {"plain": "pp", "m": {"keep": "k3", "nn": None}, "free": {"x": None, "l": [1, None, {"a": None}]}}
        ),
        {
            "metadata": {"annotations": {}},
            "spec": {"free": {"l": [1, None, {}]}, "m": {"keep": "k3"}, "nn": None, "plain": "pp"},
        },
    ),
    "never-applied-client-side": (
        None,
        live_nully(
            {"free": {"deep": {"a": 1, "b": [1, 2]}, "s": "a<b&c>d", "x": 1}, "nn": "v"}, labels={"a": "b"}
        ),
        nully(
            {
                "nn": None,
                "m": {"nn": None, "keep": "k"},
                "free": {"x": None, "deep": {"a": None, "b": [3], "c": {"d": None}}, "s": "a<b&c>d"}
                | {"f": 1.5, "g": 1e-07, "u": "é"},
            },
            annotations={"z": "<&>"},
        ),
        {
            "metadata": {"annotations": {"z": "<&>"}},
            "spec": {
                "free": {"deep": {"a": None, "b": [3], "c": {"d": None}}, "f": 1.5, "g": 1e-07, "u": "é"}
                | {"x": None},
                "m": {"keep": "k", "nn": None},
                "nn": None,
            },
        },
    ),
    "keys-dropped-from-the-file-and-labels": (
        nully(
            {
                "nn": None,
                "m": {"nn": None, "keep": "k"},
                "free": {"x": None, "deep": {"a": None, "b": [3], "c": {"d": None}}, "s": "a<b&c>d"}
                | {"f": 1.5, "g": 1e-07, "u": "é"},
            },
            annotations={"z": "<&>"},
        ),
        live_nully(
            {"free": {"deep": {"b": [3], "c": {}}, "f": 1.5, "g": 1e-07, "s": "a<b&c>d", "u": "é"}}
            | {"m": {"keep": "k"}},
            annotations={"z": "<&>"},
            labels={"a": "b"},
        ),
        nully({"free": {"deep": {"b": [3]}, "s": "x", "big": 12345678901234567890}}, labels={"a": "c"}),
        {
            "metadata": {"annotations": {"z": None}, "labels": {"a": "c"}},
            "spec": {
                "free": {"big": 12345678901234567000, "deep": {"a": None, "c": None}, "f": None, "g": None}
                | {"s": "x", "u": None, "x": None},
                "m": None,
                "nn": None,
            },
        },
    ),
    "a-type-change-replaces": (
        nully({"free": {"big": 12345678901234567000, "deep": {"b": [3]}, "s": "x"}}, labels={"a": "c"}),
        live_nully({"free": {"big": 12345678901234567000, "deep": {"b": [3]}, "s": "x"}}, labels={"a": "c"}),
        nully({"free": {"deep": 5}, "plain": "p"}),
        {
            "metadata": {"annotations": {}, "labels": None},
            "spec": {"free": {"big": None, "deep": 5, "s": None}, "plain": "p"},
        },
    ),
    "a-map-again": (
        nully({"free": {"deep": 5}, "plain": "p"}),
        live_nully({"free": {"deep": 5}, "plain": "p"}),
        nully({"free": {"deep": {"q": 1}}, "plain": "p"}),
        {"metadata": {"annotations": {}}, "spec": {"free": {"deep": {"q": 1}}}},
    ),
}


@pytest.mark.parametrize("case", APPLIES)
def test_a_client_side_apply_of_an_existing_object_sends_kubectls_patch(case: str) -> None:
    applied, live, file, patch = APPLIES[case]
    if applied is not None:
        live["metadata"].setdefault("annotations", {})[LAST_APPLIED] = last_applied_config(applied)
    sent = client_side_patch(original_config(live), with_last_applied(file), live)
    assert json.loads(go_json(without_copy(sent))) == patch  # the same JSON on the wire
    copied = sent.get("metadata", {}).get("annotations", {}).get(LAST_APPLIED)
    assert copied == (None if applied == file else last_applied_config(file))


def test_an_unreadable_last_applied_copy_is_an_error_as_for_kubectl() -> None:
    current = live_nully({})
    current["metadata"]["annotations"] = {LAST_APPLIED: "[1]"}
    with pytest.raises(ValueError, match="not a JSON object"):
        original_config(current)
    assert original_config(live_nully({})) is None


def test_the_operators_bookkeeping_on_a_resource_is_not_shown() -> None:
    """kopf's last handled digest (and its progress) on a resource the operator serves is the
    operator's, not the user's: a diff of the resource neither shows nor counts it."""
    from helm_operator.preview.report import shown

    live = {
        "apiVersion": "test.helm-operator.io/v1",
        "kind": "Tiny",
        "metadata": {
            "name": "a",
            "annotations": {"kopf.helm-operator.io/last-handled-digest": "abc", "team": "payments"},
        },
        "spec": {"message": "a"},
    }
    out = shown(live)
    assert out is not None and out["metadata"]["annotations"] == {"team": "payments"}
    del live["metadata"]["annotations"]["team"]
    out = shown(live)
    assert out is not None and "annotations" not in out["metadata"]
