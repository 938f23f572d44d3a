"""``helm-operator init``: a new project, its config/ from the same renderer as this repository's."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from helm_operator import __version__
from helm_operator.cli.main import main
from helm_operator.config.watches import load_watches
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
        "config/02-crd-rollouts.yaml",
        "config/02-rbac.yaml",
        "config/03-deployment.yaml",
        "config/04-metrics-service.yaml",
        "config/05-conversion-service.yaml",
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


E2E_CHARTS = Path(__file__).resolve().parents[1] / "e2e" / "charts"


def create_api(capsys: pytest.CaptureFixture[str], project: Path, *args: str) -> tuple[int, str, str]:
    rc = main(["create-api", "--project-dir", str(project), *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def has_null(value: object) -> bool:
    if isinstance(value, dict):
        return any(v is None or has_null(v) for v in value.values())
    if isinstance(value, list):
        return any(has_null(v) for v in value)
    return False


def test_init_then_create_api_three_times_keeps_a_project_that_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """init writes `[]` (with its format in comments); every create-api adds to that list."""
    project = tmp_path / "shop"
    assert init(capsys, str(project), "--name", "shop")[0] == 0
    comments = (project / "watches.yaml").read_text().replace("[]\n", "")
    kinds = [
        ("proxy.example.com", "IngressProxy", "ingressproxy", "ingressproxies"),
        ("apps.example.com", "WebAnalytics", "analytics", "webanalytics"),
        ("monitoring.example.com", "KubeStateMetrics", "statemetrics", "kubestatemetrics"),
    ]
    for group, kind, chart, plural in kinds:
        rc, out, err = create_api(
            capsys,
            project,
            "--group",
            group,
            "--version",
            "v1",
            "--kind",
            kind,
            "--chart",
            str(E2E_CHARTS / chart),
        )
        assert rc == 0, err
        assert f"wrote {project / 'crds' / f'{plural}.{group}.yaml'}" in out
    text = (project / "watches.yaml").read_text()
    assert text.startswith(comments)  # init's explanation of the format stays
    watches = load_watches(project / "watches.yaml")
    assert [(w.group, w.kind, w.chart.path) for w in watches] == [
        (group, kind, (project / "charts" / kind.lower()).resolve()) for group, kind, _, _ in kinds
    ]
    assert create_api(capsys, project, "--regenerate-crd", "--check")[0] == 0
    for _, kind, _, _ in kinds:
        sample = (project / "samples" / f"{kind.lower()}.yaml").read_text()
        assert not has_null(yaml.safe_load(sample)), sample  # kubectl apply would drop them
    assert (
        "left out (kubectl apply drops nulls): controller.image.digest, controller.logFormat"
        in (project / "samples/ingressproxy.yaml").read_text()
    )
    assert "# An IngressProxy with the defaults" in (project / "samples/ingressproxy.yaml").read_text()


def test_create_api_in_a_fresh_project_regenerates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    init(capsys, str(tmp_path), "--name", "shop")
    rc, out, err = create_api(capsys, tmp_path, "--regenerate-crd", "--check")
    assert (rc, out, err) == (0, "", "")


@pytest.mark.parametrize(
    ("watches", "message"),
    [
        (
            "- {group: a.example.com, version: v1, kind: A, chart: charts/a, reconcilePeriod: soon}\n",
            "watches.yaml: entry 0: field 'reconcilePeriod': expected a duration",
        ),
        ("- {group: a.example.com, version: v1, kind: A, chart: charts/nowhere}\n", "entry 0: field 'chart'"),
        ("watches:\n  - kind: A\n", "watches.yaml: expected a list of watch entries"),
        ("- a\n...\n", "add this entry by hand:\n- group: b.example.com\n"),
    ],
)
def test_create_api_checks_the_resulting_watches_file_before_writing_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], watches: str, message: str
) -> None:
    init(capsys, str(tmp_path), "--name", "shop")
    (tmp_path / "charts/a").mkdir()
    (tmp_path / "charts/a/Chart.yaml").write_text("apiVersion: v2\nname: a\nversion: 0.1.0\n")
    (tmp_path / "watches.yaml").write_text(watches)
    before = files_of(tmp_path)
    rc, _, err = create_api(
        capsys, tmp_path, "--group", "b.example.com", "--version", "v1", "--kind", "B",
        "--chart", str(E2E_CHARTS / "analytics"),
    )  # fmt: skip
    assert rc == 2 and message in err, err
    assert files_of(tmp_path) == before  # no chart, sample or CRD, and the watches file as it was


def test_create_api_says_when_a_chart_needs_cluster_scoped_objects_and_writes_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "ops"
    assert init(capsys, str(project), "--name", "ops")[0] == 0
    base = ["--version", "v1", "--chart"]
    rc, _, err = create_api(
        capsys, project, "--group", "a.example.com", "--kind", "Exporter", *base, str(E2E_CHARTS / "exporter")
    )
    assert rc == 0, err
    assert "note: the chart may render cluster-scoped objects (ClusterRole, ClusterRoleBinding)" in err
    assert "allowClusterScoped: true" in err and "--allow-cluster-scoped" in err
    rc, _, err = create_api(
        capsys,
        project,
        "--group",
        "b.example.com",
        "--kind",
        "Controller",
        "--allow-cluster-scoped",
        *base,
        str(E2E_CHARTS / "withcrds"),
    )
    assert rc == 0 and "note:" not in err, err
    watches = {w.kind: w for w in load_watches(project / "watches.yaml")}
    assert not watches["Exporter"].allow_cluster_scoped and watches["Controller"].allow_cluster_scoped
    rc, _, err = create_api(
        capsys, project, "--group", "c.example.com", "--kind", "Plain", *base, str(E2E_CHARTS / "tiny")
    )
    assert rc == 0 and "note:" not in err, err  # nothing cluster-scoped: nothing to say
