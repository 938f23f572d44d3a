"""``helm-operator init``: a new project, its config/ from the same renderer as this repository's."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from helm_operator import __version__
from helm_operator.cli.main import main
from helm_operator.scaffold import deploy

from .test_dockerfile import check_dockerfile


def init(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["init", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_init_creates_a_project_that_deploys_and_builds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "shop"
    rc, out, _ = init(capsys, str(project), "--name", "shop", "--image", "registry.example/shop:1.0")
    assert rc == 0
    written = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    assert written == [
        ".dockerignore",
        "Dockerfile",
        "README.md",
        "charts/.gitkeep",
        "config/00-namespace.yaml",
        "config/01-service-account.yaml",
        "config/02-rbac.yaml",
        "config/03-deployment.yaml",
        "config/04-metrics-service.yaml",
        "crds/.gitkeep",
        "dist/README.md",
        "hooks/.gitkeep",
        "samples/.gitkeep",
        "watches.yaml",
    ]
    assert "helm-operator rbac" in out
    assert yaml.safe_load((project / "watches.yaml").read_text()) == []
    assert "kind: Memcached" in (project / "watches.yaml").read_text()  # the format, as a comment

    dep = yaml.safe_load((project / "config/03-deployment.yaml").read_text())
    assert dep["metadata"] == {
        "name": "shop",
        "namespace": "shop-system",
        "labels": {"app.kubernetes.io/name": "shop"},
    }
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/shop:1.0"
    assert dep == deploy.deployment(deploy.Deploy("shop", "shop-system", "registry.example/shop:1.0"))
    ns = yaml.safe_load((project / "config/00-namespace.yaml").read_text())
    assert ns["metadata"]["name"] == "shop-system"

    rbac_docs = [d for d in yaml.safe_load_all((project / "config/02-rbac.yaml").read_text()) if d]
    subjects = {(s["name"], s["namespace"]) for d in rbac_docs for s in d.get("subjects", [])}
    assert subjects == {("shop", "shop-system")}
    resources = {r for d in rbac_docs for rule in d.get("rules", []) for r in rule["resources"]}
    assert {"leases", "events", "secrets", "namespaces"} <= resources

    stages = check_dockerfile(
        (project / "Dockerfile").read_text(), project, (project / ".dockerignore").read_text()
    )
    assert any(f"HELM_OPERATOR_VERSION={__version__}" == a.args for a in stages[-1].all("ARG"))
    assert "docker build -t registry.example/shop:1.0 ." in (project / "Dockerfile").read_text()


def test_init_rbac_is_what_the_rbac_command_writes_for_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The base RBAC init writes is the generator's own output for a project without kinds."""
    init(capsys, str(tmp_path), "--name", "shop")
    written = (tmp_path / "config/02-rbac.yaml").read_text()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config/02-rbac.yaml").unlink()
    assert main(["rbac", "--watches-file", "watches.yaml", "--out", "config/02-rbac.yaml"]) == 0
    assert (tmp_path / "config/02-rbac.yaml").read_text() == written


def test_init_refuses_to_overwrite_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "watches.yaml").write_text("# mine\n")
    (tmp_path / "charts" / "web").mkdir(parents=True)
    rc, _, err = init(capsys, str(tmp_path), "--name", "shop")
    assert rc == 2
    assert "refusing to overwrite existing files (pass --force to replace them)" in err
    assert str(tmp_path / "watches.yaml") in err
    assert (tmp_path / "watches.yaml").read_text() == "# mine\n"
    assert not (tmp_path / "Dockerfile").exists()  # nothing was written

    rc, _, _ = init(capsys, str(tmp_path), "--name", "shop", "--force")
    assert rc == 0
    assert yaml.safe_load((tmp_path / "watches.yaml").read_text()) == []
    assert not (tmp_path / "charts" / ".gitkeep").exists()  # charts/ has content already
    assert (tmp_path / "crds" / ".gitkeep").exists()


def test_init_names_the_operator_after_its_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "My_Cache.Operator"
    assert init(capsys, str(project))[0] == 0
    sa = yaml.safe_load((project / "config/01-service-account.yaml").read_text())
    assert sa["metadata"]["name"] == "my-cache-operator"
    dep = yaml.safe_load((project / "config/03-deployment.yaml").read_text())
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "my-cache-operator:dev"


def test_init_rejects_names_kubernetes_would_reject(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = init(capsys, str(tmp_path / "x"), "--name", "Shop_1")
    assert rc == 2 and "invalid name 'Shop_1'" in err and "--name" in err
    assert not (tmp_path / "x").exists()
