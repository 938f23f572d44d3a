"""What helm printed, classified the same way for Helm 3 and Helm 4."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from helm_operator.adapters.helm import (
    PERMANENT_REASONS,
    Helm,
    HelmSettings,
    classify,
    ownership_message,
    tenant_message,
)

RENDER_FAILURES = [
    # Helm 4: a template that cannot execute cites file:line:col without "template:"
    'c1/templates/bad.yaml:6:15\n  executing "c1/templates/bad.yaml" at <.Values.nope.deeper>:\n'
    "    nil pointer evaluating interface {}.deeper",
    'parse error at (c1/templates/bad.yaml:6): unexpected "}" in operand',
    "YAML parse error on c1/templates/bad.yaml: error converting YAML to JSON: yaml: line 4",
    # Helm 3
    "UPGRADE FAILED: template: c1/templates/bad.yaml:6:15: executing ... nil pointer evaluating",
    "INSTALLATION FAILED: execution error at (tiny/templates/configmap.yaml:8:4): the chart refuses",
    "unable to build kubernetes objects from release manifest: error validating data",
]


def test_a_kind_the_server_does_not_serve_yet_is_retried() -> None:
    text = (
        'unable to build kubernetes objects from release manifest: resource mapping not found for name: "x" '
        'namespace: "" from "c/templates/x.yaml": no matches for kind "Foo" in version "example.com/v1"'
    )
    assert classify(text) == "KindNotServed" and "KindNotServed" not in PERMANENT_REASONS


@pytest.mark.parametrize("text", RENDER_FAILURES)
def test_render_failures_are_permanent_under_both_majors(text: str) -> None:
    assert classify(text) == "RenderFailed"
    assert "RenderFailed" in PERMANENT_REASONS


def test_apply_and_cluster_failures_are_retried() -> None:
    text = 'UPGRADE FAILED: cannot patch "web" with kind Deployment: spec.replicas: Invalid value: -1'
    assert classify(text) == "HelmFailed"
    assert classify("context deadline exceeded") == "Timeout"
    assert classify("kubernetes cluster unreachable: connection refused") == "HelmFailed"
    assert "HelmFailed" not in PERMANENT_REASONS and "Timeout" not in PERMANENT_REASONS


def test_tenant_violations_and_oversized_records() -> None:
    text = (
        "INSTALLATION FAILED: error while running post render on files: error while running command "
        "helm-operator-postrender. error output:\nhelm-operator: NamespaceViolation: ConfigMap/x targets "
        "namespace 'kube-system'; allowed: a\n: exit status 3"
    )
    assert classify(text) == "NamespaceViolation"
    assert (
        tenant_message(text) == "NamespaceViolation: ConfigMap/x targets namespace 'kube-system'; allowed: a"
    )
    big = (
        'create: failed to create: Secret "sh.helm.release.v1.r.v1" is invalid: '
        "data: Too long: must have at most 1048576 bytes"
    )
    assert classify(big) == "ReleaseTooLarge" and "ReleaseTooLarge" in PERMANENT_REASONS


def test_outage_retries_are_logged_once_per_period() -> None:
    import logging

    from helm_operator.runtime.handlers import OutageLogFilter

    f = OutageLogFilter(every=60)

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("kopf.objects", logging.ERROR, "", 0, msg, None, None)

    unreachable = "Timer 'x' failed temporarily: API server unreachable (MaxRetryError); retrying"
    assert f.filter(record(unreachable))
    assert not any(f.filter(record(unreachable)) for _ in range(40))
    assert f.filter(record("Handler 'x' failed temporarily: something else"))
    f.last -= 61
    again = record(unreachable)
    assert f.filter(again) and "(40 more such retries in the last 60s)" in again.getMessage()


def test_helm_runs_with_the_go_settings_unless_the_operators_environment_has_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wrapper every helm process of the operator starts through (after the first install)."""
    fake = tmp_path / "helm"
    fake.write_text(
        '#!/bin/sh\ncase "$1" in version) printf v4.3.1 ;; '
        '*) echo "GOMAXPROCS=$GOMAXPROCS GOGC=$GOGC plugins=${HELM_PLUGINS:+yes}" ;; esac\n'
    )
    fake.chmod(0o755)
    helm = Helm(HelmSettings(executable=str(fake), workdir=tmp_path / "work", chart_cache=tmp_path / "c"))
    asyncio.run(helm._prepare_postrender())
    wrapper = tmp_path / "work" / "helm"

    def settings(**env: str) -> str:
        monkeypatch.delenv("GOMAXPROCS", raising=False)
        monkeypatch.delenv("GOGC", raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        return subprocess.run(
            [str(wrapper), "upgrade"], capture_output=True, text=True, check=True
        ).stdout.strip()

    assert settings() == "GOMAXPROCS=1 GOGC=200 plugins=yes"
    assert settings(GOGC="50", GOMAXPROCS="4") == "GOMAXPROCS=4 GOGC=50 plugins=yes"


def test_an_object_of_another_release_is_a_precise_permanent_stall() -> None:
    text = (
        'Unable to continue with install: ClusterRole "exp-exporter" in namespace "" exists and cannot be '
        "imported into the current release: invalid ownership metadata; annotation validation error: "
        'key "meta.helm.sh/release-namespace" must equal "pl-c": current value is "pl-b"'
    )
    assert classify(text) == "OwnershipConflict" and "OwnershipConflict" in PERMANENT_REASONS
    message = ownership_message(text)
    assert message.startswith("ClusterRole exp-exporter already exists and belongs to")
    assert "namespace 'pl-b'" in message and "helm-operator.io/retry" in message
    by_name = text.replace('release-namespace" must equal "pl-c": current value is "pl-b"', "")
    by_name += 'release-name" must equal "web": current value is "other"'
    assert "Helm release 'other'" in ownership_message(by_name)
