"""Field conflicts of Helm 4's server-side apply: parsed from what the API server said, and settled
by the drift rules (taken back, or a stall that names who owns what)."""

from __future__ import annotations

from helm_operator.adapters.helm import PERMANENT_REASONS, classify, said
from helm_operator.release.conflicts import FieldConflict, conflicts_in, refusal, still

ONE = (
    "UPGRADE FAILED: conflict occurred while applying object d-1/handed-config /v1, Kind=ConfigMap: "
    'Apply failed with 1 conflict: conflict with "kubectl-patch" using v1: .data.message'
)
SEVERAL = (
    "UPGRADE FAILED: conflict occurred while applying object d-1/web apps/v1, Kind=Deployment: "
    'Apply failed with 3 conflicts: conflicts with "hpa-controller" with subresource "scale" using apps/v1 at 2026-11-29T21:20:58Z:\n'  # noqa: E501
    "- .spec.replicas\n"
    'conflicts with "kubectl-edit" using apps/v1:\n'
    '- .spec.template.spec.containers[name="app"].image\n'
    "- .metadata.labels.tier"
)


def test_one_conflict_names_its_object_manager_and_field() -> None:
    (one,) = conflicts_in(ONE)
    assert one == FieldConflict("ConfigMap", "d-1", "handed-config", "kubectl-patch", (".data.message",))
    assert one.obj == "ConfigMap d-1/handed-config"


def test_several_managers_and_fields_of_one_object() -> None:
    assert conflicts_in(SEVERAL) == (
        FieldConflict("Deployment", "d-1", "web", "hpa-controller", (".spec.replicas",)),
        FieldConflict(
            "Deployment",
            "d-1",
            "web",
            "kubectl-edit",
            ('.spec.template.spec.containers[name="app"].image', ".metadata.labels.tier"),
        ),
    )


def test_a_conflict_is_its_own_class_permanent_once_settled_and_said_once() -> None:
    helm4 = f'level=WARN msg="upgrade failed" name=handed error="{ONE}"\nError: {ONE}'
    assert classify(helm4) == "FieldConflict" and "FieldConflict" in PERMANENT_REASONS
    assert said(helm4) == ONE  # Helm 4 logs the error, then prints it: kept once
    assert conflicts_in(said(helm4)) == conflicts_in(ONE)
    assert said("Error: INSTALLATION FAILED: x") == "INSTALLATION FAILED: x"
    assert said("no error line") == "no error line"
    assert classify('cannot patch "web": Apply failed with nothing') != "FieldConflict"


def test_untrusted_fields_are_taken_back_only_where_drift_is_corrected() -> None:
    edit = conflicts_in(ONE)
    assert refusal(edit, trusted=("trusted-scaler",), mode="enabled") is None
    warned = refusal(edit, trusted=(), mode="warn")
    assert warned is not None and "'warn'" in warned and "ConfigMap d-1/handed-config .data.message" in warned
    assert "helm-operator.io/drift=enabled" in warned and "part-way" in warned


def test_a_trusted_managers_field_is_never_taken_and_the_stall_names_it() -> None:
    why = refusal(conflicts_in(SEVERAL), trusted=("hpa-controller",), mode="enabled")
    assert why is not None
    assert "hpa-controller" in why and ".spec.replicas" in why and "driftTrustedManagers" in why
    assert "kubectl-edit" not in why  # only what may not be taken is named


def test_nothing_named_is_never_taken_blindly() -> None:
    assert refusal((), trusted=(), mode="enabled") is not None
    unnamed = conflicts_in('Apply failed with 1 conflict: conflict with "kubectl-patch" using v1: .data.x')
    assert unnamed[0].kind == "" and refusal(unnamed, trusted=(), mode="enabled") is not None
    assert "ConfigMap d-1/handed-config" in still(conflicts_in(ONE))


def test_a_cluster_scoped_object_has_no_namespace() -> None:
    text = (
        "conflict occurred while applying object /reader rbac.authorization.k8s.io/v1, Kind=ClusterRole: "
        'Apply failed with 1 conflict: conflict with "kubectl-edit" using rbac.authorization.k8s.io/v1: '
        ".rules"
    )
    (c,) = conflicts_in(text)
    assert (c.kind, c.namespace, c.name, c.obj) == ("ClusterRole", "", "reader", "ClusterRole reader")
