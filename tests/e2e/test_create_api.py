"""`helm-operator create-api` on the real API server: the generated CRDs are accepted, `kubectl
explain` documents the chart's values, a wrong spec is refused at apply time naming the field, the
sample applies unchanged, and a chart from a repository is pulled with the real helm."""

from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_operator.dev.devcluster import DevCluster
from helm_operator.dev.tools import Toolchain
from helm_operator.scaffold import crd

from .operator import REPO

SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["replicas", "image"],
    "properties": {
        "replicas": {"description": "Number of Pods.", "type": "integer", "minimum": 1},
        "mode": {"description": "How it runs.", "type": "string", "enum": ["fast", "safe"]},
        "image": {"$ref": "#/definitions/image"},
        "timeout": {"description": "Seconds, or a duration such as 30s.", "type": ["integer", "string"]},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "anything": {"oneOf": [{"type": "string"}, {"type": "object"}]},
        "ports": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["port"],
                "properties": {"name": {"type": "string"}, "port": {"type": "integer", "maximum": 65535}},
            },
        },
    },
    "definitions": {
        "image": {
            "description": "The container image.",
            "type": "object",
            "required": ["repository"],
            "properties": {"repository": {"type": "string", "minLength": 1}, "tag": {"type": "string"}},
        }
    },
}


def write_chart(root: Path, name: str, values: dict[str, Any], schema: dict[str, Any] | None) -> Path:
    chart = root / name
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        f"apiVersion: v2\nname: {name}\nversion: 0.1.0\ndescription: The {name} test chart.\n"
    )
    (chart / "values.yaml").write_text(yaml.safe_dump(values))
    (chart / "templates/configmap.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n"
        "data:\n  values: {{ toJson .Values | quote }}\n"
    )
    if schema is not None:
        (chart / "values.schema.json").write_text(json.dumps(schema, indent=2))
    return chart


def create_api(project: Path, *args: str, helm: Path | None = None) -> subprocess.CompletedProcess[str]:
    flags = ["--helm", str(helm)] if helm else []
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "helm_operator.cli",
            "create-api",
            "--project-dir",
            str(project),
            *flags,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


class Api:
    """A generated kind on the cluster: apply its CRD, apply resources, explain fields."""

    def __init__(self, cluster: DevCluster, project: Path, group: str, kind: str, plural: str) -> None:
        self.cluster, self.project = cluster, project
        self.group, self.kind, self.plural = group, kind, plural
        self.crd = project / "crds" / f"{plural}.{group}.yaml"

    def install(self) -> None:
        self.cluster.kubectl("apply", "-f", str(self.crd))
        self.cluster.kubectl(
            "wait", "--for=condition=Established", f"crd/{self.plural}.{self.group}", "--timeout=60s"
        )

    def apply(self, ns: str, name: str, spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        doc = {
            "apiVersion": f"{self.group}/v1",
            "kind": self.kind,
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }
        return self.cluster.kubectl("apply", "-f", "-", input=json.dumps(doc), check=False)

    def explain(self, path: str, until: str = "") -> str:
        """``kubectl explain``; the API server publishes a changed CRD's OpenAPI a moment later, so
        wait (briefly) for the kind, or for ``until`` to show."""
        for _ in range(60):
            out = self.cluster.kubectl(
                "explain", f"{self.plural}.{path}", f"--api-version={self.group}/v1", check=False
            )
            if out.returncode == 0 and until in out.stdout:
                return out.stdout
            time.sleep(0.5)
        raise AssertionError(f"kubectl explain {self.plural}.{path}: {out.stdout}{out.stderr}")

    def remove(self) -> None:
        self.cluster.kubectl("delete", "-f", str(self.crd), "--wait=false", check=False)


@pytest.fixture
def apis(cluster: DevCluster) -> Iterator[list[Api]]:
    made: list[Api] = []
    yield made
    for api in made:
        api.remove()


def group() -> str:
    return f"g{os.urandom(3).hex()}.crdgen.test.helm-operator.io"


def test_chart_with_a_schema(cluster: DevCluster, namespace: str, tmp_path: Path, apis: list[Api]) -> None:
    values = {
        "replicas": 1,
        "mode": "fast",
        "image": {"repository": "nginx", "tag": "1.27"},
        "labels": {},
        "ports": [{"port": 80}],
    }
    chart = write_chart(tmp_path, "widget", values, SCHEMA)
    project, g = tmp_path / "project", group()
    proc = create_api(project, "--group", g, "--version", "v1", "--kind", "Widget", "--chart", str(chart))
    assert proc.returncode == 0, proc.stderr
    api = Api(cluster, project, g, "Widget", "widgets")
    apis.append(api)
    api.install()

    spec = api.explain("spec")
    for field in ("replicas\t<integer>", "mode\t<string>", "image\t<Object>", "labels\t<map[string]string>"):
        assert field in spec, spec
    assert "Number of Pods." in spec and "The values of the widget chart" in " ".join(spec.split())
    # Required by the chart's schema but set by its values.yaml: optional in the spec.
    assert "repository\t<string>\n" in api.explain("spec.image")
    assert "port\t<integer> -required-" in api.explain("spec.ports")

    refused = api.apply(namespace, "bad", {"replicas": "three"})
    assert refused.returncode != 0
    assert 'spec.replicas: Invalid value: "string"' in refused.stderr, refused.stderr
    refused = api.apply(namespace, "bad", {"replicas": 0, "mode": "slow", "image": {"repository": ""}})
    for expected in (
        "spec.replicas: Invalid value: 0",
        'spec.mode: Unsupported value: "slow"',
        'spec.image.repository: Invalid value: ""',
    ):
        assert expected in refused.stderr, refused.stderr
    refused = api.apply(namespace, "bad", {"ports": [{"name": "http"}]})  # list items get no defaults
    assert "spec.ports[0].port: Required value" in refused.stderr, refused.stderr
    refused = api.apply(namespace, "bad", {"labels": {"a": 1}})
    assert "spec.labels.a: Invalid value" in refused.stderr, refused.stderr
    refused = api.apply(namespace, "bad", {"replica": 2})  # a typo: not a field of the chart
    assert 'unknown field "spec.replica"' in refused.stderr, refused.stderr

    sample = yaml.safe_load((project / "samples/widget.yaml").read_text())
    assert sample["spec"] == values
    applied = cluster.kubectl(
        "apply", "-n", namespace, "-f", str(project / "samples/widget.yaml"), check=False
    )
    assert applied.returncode == 0, applied.stderr
    # Free-form and int-or-string fields take what the chart's schema allows; nothing is pruned.
    spec2 = {"replicas": 2, "timeout": "30s", "anything": {"x": [1]}, "labels": {"a": "b"}}
    assert api.apply(namespace, "other", spec2).returncode == 0
    stored = json.loads(cluster.kubectl("get", "widgets." + g, "other", "-n", namespace, "-o", "json").stdout)
    assert stored["spec"] == spec2
    assert api.apply(namespace, "other", {**spec2, "timeout": 30}).returncode == 0


def test_chart_without_a_schema_is_inferred(
    cluster: DevCluster, namespace: str, tmp_path: Path, apis: list[Api]
) -> None:
    values = {
        "replicaCount": 2,
        "image": {"repository": "nginx", "tag": ""},
        "service": {"type": "ClusterIP", "port": 80},
        "podAnnotations": {},
        "extra": None,
        "args": ["--verbose"],
    }
    chart = write_chart(tmp_path, "gadget", values, None)
    project, g = tmp_path / "project", group()
    proc = create_api(
        project,
        "--group",
        g,
        "--version",
        "v1",
        "--kind",
        "Gadget",
        "--chart",
        str(chart),
        "--plural",
        "gadgetry",
    )
    assert proc.returncode == 0, proc.stderr
    assert "plural: gadgetry" in (project / "watches.yaml").read_text()
    api = Api(cluster, project, g, "Gadget", "gadgetry")
    apis.append(api)
    api.install()

    spec = api.explain("spec")
    for field in (
        "replicaCount\t<integer>",
        "service\t<Object>",
        "args\t<[]string>",
        "podAnnotations\t<Object>",
    ):
        assert field in spec, spec
    assert "types inferred from the chart's values.yaml" in " ".join(spec.split())
    assert "port\t<integer>" in api.explain("spec.service")

    refused = api.apply(namespace, "bad", {"replicaCount": "two", "service": {"port": "http"}})
    assert 'spec.replicaCount: Invalid value: "string"' in refused.stderr, refused.stderr
    assert 'spec.service.port: Invalid value: "string"' in refused.stderr, refused.stderr

    free = {"podAnnotations": {"a": "b"}, "extra": {"anything": [1, "two"]}, "replicaCount": 3}
    assert api.apply(namespace, "free", free).returncode == 0
    stored = json.loads(cluster.kubectl("get", f"gadgetry.{g}", "free", "-n", namespace, "-o", "json").stdout)
    assert stored["spec"] == free
    applied = cluster.kubectl(
        "apply", "-n", namespace, "-f", str(project / "samples/gadget.yaml"), check=False
    )
    assert applied.returncode == 0, applied.stderr


def test_a_repository_chart_is_pulled_and_crds_regenerate(
    cluster: DevCluster, tools: Toolchain, tmp_path: Path, apis: list[Api]
) -> None:
    """`--chart NAME --repo URL` pulls with the real helm (an HTTP chart repository served here);
    a changed chart schema makes `--regenerate-crd --check` fail until the CRD is regenerated."""
    tools.require("helm")
    repo = tmp_path / "repo"
    repo.mkdir()
    chart = write_chart(tmp_path / "src", "sprocket", {"teeth": 12}, None)
    env = {**os.environ, "HELM_CACHE_HOME": str(tmp_path / "hc"), "HELM_CONFIG_HOME": str(tmp_path / "hcfg")}
    for args in (["package", str(chart), "-d", str(repo)], ["repo", "index", str(repo)]):
        subprocess.run([str(tools.helm), *args], check=True, capture_output=True, env=env, timeout=60)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(repo))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    project, g = tmp_path / "project", group()
    try:
        args = ("--group", g, "--version", "v1", "--kind", "Sprocket", "--chart", "sprocket")
        url = f"http://127.0.0.1:{server.server_address[1]}"
        proc = create_api(project, *args, "--repo", url, "--chart-version", "0.1.0", helm=tools.helm)
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load((project / "charts/sprocket/values.yaml").read_text()) == {"teeth": 12}
    assert "chart: charts/sprocket" in (project / "watches.yaml").read_text()
    api = Api(cluster, project, g, "Sprocket", "sprockets")
    apis.append(api)
    api.install()
    assert "teeth\t<integer>" in api.explain("spec")

    again = create_api(project, *args, "--repo", url, helm=tools.helm)
    assert again.returncode == 2 and f"already serves {g}/v1 Sprocket" in again.stderr

    (project / "charts/sprocket/values.schema.json").write_text(
        json.dumps(
            {
                "type": "object",
                "properties": {"teeth": {"type": "integer", "maximum": 40}, "size": {"type": "string"}},
            }
        )
    )
    check = create_api(project, "--regenerate-crd", "--check")
    assert check.returncode == 1 and "out of date" in check.stdout
    assert create_api(project, "--regenerate-crd").returncode == 0
    api.install()
    assert "size\t<string>" in api.explain("spec", until="size")
    assert create_api(project, "--regenerate-crd", "--check").returncode == 0


def _every_chart() -> list[Path]:
    return sorted(
        p.parent
        for folder in ("charts", "tests/e2e/charts", "bench/charts")
        for p in (REPO / folder).glob("*/Chart.yaml")
    )


@pytest.mark.parametrize("chart", _every_chart(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_charts_generated_sample_applies_to_its_generated_crd(
    cluster: DevCluster, namespace: str, tmp_path: Path, apis: list[Api], chart: Path
) -> None:
    """create-api's sample is accepted as it is by create-api's CRD: by a client-side `kubectl
    apply` (which drops nulls) and stored unchanged, and by a server-side apply (which keeps them)."""
    kind = "".join(part.capitalize() for part in chart.name.replace("_", "-").split("-"))
    project, g = tmp_path / "project", group()
    proc = create_api(project, "--group", g, "--version", "v1", "--kind", kind, "--chart", str(chart))
    assert proc.returncode == 0, proc.stderr
    api = Api(cluster, project, g, kind, crd.plural_of(kind))
    apis.append(api)
    api.install()
    sample = project / "samples" / f"{kind.lower()}.yaml"
    for flags in (["--dry-run=server"], ["--server-side", "--dry-run=server"], []):
        applied = cluster.kubectl("apply", "-n", namespace, *flags, "-f", str(sample), check=False)
        assert applied.returncode == 0, (flags, applied.stderr)
    stored = json.loads(
        cluster.kubectl(
            "get", f"{api.plural}.{g}", f"{kind.lower()}-sample", "-n", namespace, "-o", "json"
        ).stdout
    )
    assert stored["spec"] == yaml.safe_load(sample.read_text())["spec"]  # nothing dropped or defaulted
