"""The Dockerfile builds what the product needs, and the committed image/deploy files are the ones
``helm_operator/scaffold/deploy.py`` renders (so the repository and ``helm-operator init`` agree).

No container engine here: the Dockerfile is parsed (instructions, stages) and checked.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from helm_operator.scaffold import deploy

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Instruction:
    keyword: str  # upper case
    args: str  # the rest, continuation lines joined
    line: int

    def words(self) -> list[str]:
        return shlex.split(self.args)

    def exec_form(self) -> list[str] | None:
        """The JSON (exec) form of ENTRYPOINT/CMD, or None for the shell form."""
        try:
            value = json.loads(self.args)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, list) else None


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for i in self.all("ENV"):
            words = i.words()
            if words and "=" not in words[0]:  # legacy "ENV KEY value"
                out[words[0]] = " ".join(words[1:])
            else:
                out.update(w.split("=", 1) for w in words)  # type: ignore[misc]
        return out


def parse(text: str) -> list[Stage]:
    """Instructions grouped by stage: comments dropped, ``\\`` continuations joined."""
    instructions: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comments may sit between continuation lines
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        keyword, _, rest = full.partition(" ")
        instructions.append(Instruction(keyword.upper(), rest.strip(), start))
    assert not pending, "the Dockerfile ends inside a continued line"
    stages: list[Stage] = []
    for i in instructions:
        if i.keyword == "FROM":
            words = i.words()
            words = [w for w in words if not w.startswith("--platform")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name))
        else:
            assert stages, f"line {i.line}: {i.keyword} before the first FROM"
            stages[-1].instructions.append(i)
    return stages


def bootstrap_pin(name: str) -> str:
    match = re.search(rf"^{name}_VERSION=(\S+)$", (REPO / "tools/bootstrap").read_text(), re.M)
    assert match, f"tools/bootstrap pins no {name}_VERSION"
    return match.group(1)


def copy_sources(stage: Stage) -> list[str]:
    """Source paths of the stage's COPY/ADD instructions that come from the build context."""
    out: list[str] = []
    for i in stage.all("COPY") + stage.all("ADD"):
        words = i.words()
        if any(w.startswith("--from") for w in words):
            continue
        paths = [w for w in words if not w.startswith("--")]
        out += paths[:-1]
    return out


def helm_go_stage(stages: list[Stage]) -> tuple[Stage, str]:
    for stage in stages:
        for run in stage.all("RUN"):
            if "helm.sh/helm/v4/cmd/helm@" in run.args:
                return stage, run.args
    raise AssertionError("no stage builds helm.sh/helm/v4/cmd/helm")


def dockerignore_allows(ignore: str, path: str) -> bool:
    """Docker's rule: the last matching pattern wins; a pattern also matches what is beneath."""
    allowed = True
    for line in ignore.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").rstrip("/")
        parts = path.split("/")
        if any(fnmatch.fnmatchcase("/".join(parts[: n + 1]), pattern) for n in range(len(parts))):
            allowed = negate
    return allowed


def check_dockerfile(text: str, context: Path, ignore: str) -> list[Stage]:
    """Everything both Dockerfiles (this repository's, an init'd project's) must satisfy."""
    stages = parse(text)
    assert len(stages) >= 2, "expected a multi-stage build"

    go, run = helm_go_stage(stages)
    assert go.base.startswith("golang:"), go.base
    go_version = go.base.split(":")[1].split("-")[0]
    assert tuple(map(int, go_version.split(".")[:2])) >= (1, 26), f"{go.base}: helm needs Go >= 1.26"
    pin = bootstrap_pin("HELM4")
    assert f"helm.sh/helm/v4/cmd/helm@{pin} " in run + " ", f"helm not built at tools/bootstrap's {pin}"
    assert f"-X helm.sh/helm/v4/internal/version.version={pin}" in run, "helm built without its version"
    assert go.env().get("CGO_ENABLED") == "0"

    final = stages[-1]
    assert not final.base.startswith("golang"), "the final image must not be the Go toolchain"
    users = final.all("USER")
    assert users, "the final stage runs as root"
    uid = users[-1].args.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"USER {users[-1].args}: expected a numeric non-root user"
    entry = final.all("ENTRYPOINT")
    assert entry, "no ENTRYPOINT"
    argv = entry[-1].exec_form()
    assert argv is not None, "ENTRYPOINT in shell form (signals would not reach the operator)"
    assert argv[:2] == ["helm-operator", "run"], argv
    assert any(c.words()[-1] == "/usr/local/bin/helm" for c in final.all("COPY") if "--from=helm" in c.args)

    env = final.env()
    for var in ("HOME", "TMPDIR", "HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        assert env.get(var, "").startswith("/tmp"), (
            f"{var}={env.get(var)!r}: must be under /tmp (read-only root)"
        )

    watches = argv[argv.index("--watches-file") + 1] if "--watches-file" in argv else "watches.yaml"
    workdir = final.all("WORKDIR")[-1].args if final.all("WORKDIR") else "/"
    watches = watches if watches.startswith("/") else f"{workdir}/{watches}"
    copied = [c.words()[-1] for c in final.all("COPY")]
    assert watches in copied, f"the watches file {watches} is not copied into the image"
    for folder in ("charts", "hooks"):
        assert f"{Path(watches).parent}/{folder}" in copied, f"{folder}/ is not beside the watches file"

    for stage in stages:
        for src in copy_sources(stage):
            assert (context / src).exists(), f"COPY {src}: not in {context}"
            assert dockerignore_allows(ignore, src.rstrip("/")), f"COPY {src}: excluded by .dockerignore"
    return stages


def test_repository_dockerfile() -> None:
    stages = check_dockerfile((REPO / "Dockerfile").read_text(), REPO, (REPO / ".dockerignore").read_text())
    assert any("pip wheel" in r.args for s in stages for r in s.all("RUN")), "no stage builds the wheel"
    assert any("pip install" in r.args and ".whl" in r.args for r in stages[-1].all("RUN"))


def test_the_pins_in_deploy_py_are_tools_bootstrap_s() -> None:
    assert bootstrap_pin("HELM4") == deploy.HELM_VERSION


def test_init_dockerfile_installs_the_released_package(tmp_path: Path) -> None:
    for folder in ("charts", "hooks", "dist"):
        (tmp_path / folder).mkdir()
    (tmp_path / "watches.yaml").write_text("[]\n")
    source = deploy.FromPackage("1.2.3")
    stages = check_dockerfile(deploy.dockerfile(source, "x:dev"), tmp_path, deploy.dockerignore(source))
    runs = " ".join(r.args for r in stages[-1].all("RUN"))
    args = [a.args for a in stages[-1].all("ARG")]
    assert "HELM_OPERATOR_VERSION=1.2.3" in args and "helm-operator==${HELM_OPERATOR_VERSION}" in runs


def test_init_dockerfile_installs_a_wheel_in_dist_by_its_path(tmp_path: Path) -> None:
    """A wheel of the version in dist/ is installed by path (no index can offer another), and
    only without one is the release fetched by name. The image's RUN script runs here, with a
    pip that records what it is asked."""
    import subprocess

    source = deploy.FromPackage("1.2.3")
    stages = parse(deploy.dockerfile(source, "x:dev"))
    script = next(r.args for r in stages[-1].all("RUN") if "pip install" in r.args)
    dist, bin_dir = tmp_path / "dist", tmp_path / "bin"
    dist.mkdir(), bin_dir.mkdir()
    (bin_dir / "pip").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/pip.log\n')
    (bin_dir / "pip").chmod(0o755)

    def install() -> str:
        (tmp_path / "pip.log").unlink(missing_ok=True)
        dist.mkdir(exist_ok=True)
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HELM_OPERATOR_VERSION": "1.2.3"}
        subprocess.run(["sh", "-c", script.replace("/tmp/dist", str(dist))], env=env, check=True)
        return (tmp_path / "pip.log").read_text().strip()

    (dist / "helm_operator-1.2.3-py3-none-any.whl").write_bytes(b"")
    (dist / "helm_operator-1.2.2-py3-none-any.whl").write_bytes(b"")
    assert install() == f"install --no-cache-dir {dist}/helm_operator-1.2.3-py3-none-any.whl"
    assert not dist.exists()  # removed after the install
    assert install() == "install --no-cache-dir helm-operator==1.2.3"  # no wheel of that version


@pytest.mark.parametrize("rel", sorted(deploy.repository_files()))
def test_committed_file_is_what_deploy_py_renders(rel: str) -> None:
    """Dockerfile, .dockerignore and config/ cannot drift from the renderer init uses."""
    committed = (REPO / rel).read_text() if (REPO / rel).exists() else None
    assert committed == deploy.repository_files()[rel], (
        f"{rel} differs from what helm_operator/scaffold/deploy.py renders; "
        "run `python -m helm_operator.scaffold.deploy` (and commit the result)"
    )


def test_deployment_is_hardened_and_probed() -> None:
    dep = yaml.safe_load((REPO / "config/03-deployment.yaml").read_text())
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert dep["spec"]["replicas"] == 2 and "--leader-elect" in c["args"]
    assert "--metrics-bind-address=:8080" in c["args"] and "--health-probe-bind-address=:8081" in c["args"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe, path in (
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ):
        assert c[probe]["httpGet"]["path"] == path and ports[c[probe]["httpGet"]["port"]] == 8081
    # Liveness waits for the first answer, not a fixed delay a loaded node outlasts; the budget for
    # start-up is minutes.
    assert "initialDelaySeconds" not in c["livenessProbe"]
    # A busy, healthy process answers late: a probe waits seconds for it, not the kubelet's 1 s.
    assert c["livenessProbe"]["timeoutSeconds"] >= 5 and c["readinessProbe"]["timeoutSeconds"] >= 5
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 120
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] and sc["runAsNonRoot"] and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["securityContext"]["runAsUser"] == deploy.UID
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}} in pod["volumes"]
    assert c["resources"]["requests"] and c["resources"]["limits"]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    sa = yaml.safe_load((REPO / "config/01-service-account.yaml").read_text())
    assert pod["serviceAccountName"] == sa["metadata"]["name"]


def test_the_conversion_service_reaches_replicas_that_are_not_ready_yet() -> None:
    """A leader is ready once it has handled every resource, which needs the webhook when they
    are stored in another version: its Service must not wait for readiness."""
    svc = yaml.safe_load((REPO / "config/05-conversion-service.yaml").read_text())
    dep = yaml.safe_load((REPO / "config/03-deployment.yaml").read_text())
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    (port,) = svc["spec"]["ports"]
    assert port["targetPort"] in {p["name"] for p in c["ports"]}
    assert f"--conversion-service={svc['metadata']['namespace']}/{svc['metadata']['name']}:443" in c["args"]
    metrics = yaml.safe_load((REPO / "config/04-metrics-service.yaml").read_text())
    assert "publishNotReadyAddresses" not in metrics["spec"]


def test_config_applies_in_order() -> None:
    """``kubectl apply -f config/`` goes by file name: namespace, account, the Rollout CRD, RBAC,
    then the Pods."""
    names = sorted(p.name for p in (REPO / "config").glob("*.yaml"))
    kinds = [yaml.safe_load_all((REPO / "config" / n).read_text()) for n in names]
    first = [next(d for d in docs if d)["kind"] for docs in kinds]
    expected = ["Namespace", "ServiceAccount", "CustomResourceDefinition", "ClusterRole", "Deployment"]
    assert first[:5] == expected, list(zip(names, first, strict=True))


def test_parser_reads_continuations_stages_and_exec_form() -> None:
    stages = parse(
        "# c\nFROM a:1 AS one\nRUN x \\\n  # note\n  && y\n\nFROM b\nENV A=1 B=/tmp/x\n"
        'ENTRYPOINT ["p", "q"]\nUSER 10:10\n'
    )
    assert [(s.base, s.name) for s in stages] == [("a:1", "one"), ("b", None)]
    assert stages[0].all("RUN")[0].args == "x  && y"
    assert stages[1].env() == {"A": "1", "B": "/tmp/x"}
    assert stages[1].all("ENTRYPOINT")[0].exec_form() == ["p", "q"]
    assert dockerignore_allows("*\n!charts\n**/*.pyc", "charts/x/Chart.yaml")
    assert not dockerignore_allows("*\n!charts\n", ".venv/bin/python")
