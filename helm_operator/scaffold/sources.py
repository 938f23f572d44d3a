"""What ``helm-operator rbac`` reads from a project, and the one place it runs ``helm``.

The watches file names the charts and hook modules; ``samples/`` holds example resources whose
specs are rendered too (a spec often switches on objects the defaults leave out: an HPA, an
Ingress); ``crds/`` tells the plural and scope of the project's own kinds; ``config/`` the
operator's ServiceAccount. API discovery is asked only when a kubeconfig is given.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from helm_operator.config.charts import ChartRef
from helm_operator.config.watches import Watch, load_watches
from helm_operator.core.values import user_values
from helm_operator.scaffold import rbac
from helm_operator.scaffold.rbac import ApiResource, Identity, RbacError, RenderInput, WatchedKind

SERVICE_ACCOUNT_FILE = "config/01-service-account.yaml"


def helm_template(
    helm: str, chart: ChartRef, release: str, namespace: str, values: Mapping[str, Any], what: str
) -> list[dict[str, Any]]:
    """``helm template`` one chart: hooks and the chart's CRDs included (those of ``crds/`` folders
    marked, see :func:`rbac.rendered_documents`), test hooks left out."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="rbac-values-") as f:
        yaml.safe_dump(dict(values), f)
        f.flush()
        ref = str(chart.path) if chart.path is not None else chart.ref
        cmd = [helm, "template", release, ref, "--namespace", namespace, "--include-crds", "--skip-tests"]
        cmd += ["--values", f.name]
        if chart.path is None and chart.version:
            cmd += ["--version", chart.version]
        if chart.path is None and chart.repo:
            cmd += ["--repo", chart.repo]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except FileNotFoundError:
            raise RbacError(
                f"helm not found at {helm!r}: pass --helm PATH or set HELM_OPERATOR_HELM"
            ) from None
    if proc.returncode != 0:
        raise RbacError(f"{what}: helm template failed: {proc.stderr.strip()}")
    try:
        return rbac.rendered_documents(proc.stdout)
    except yaml.YAMLError as exc:
        raise RbacError(f"{what}: helm template printed invalid YAML: {exc}") from None


def read_hook_sources(hooks: str, base: Path) -> list[tuple[str, str]]:
    """(file, source) of a watch's hook module and of the built-in hook modules it imports (and
    they import), found without importing any of them."""
    if hooks.endswith(".py"):
        path = Path(hooks) if Path(hooks).is_absolute() else base / hooks
    else:
        path = base.joinpath(*hooks.split(".")).with_suffix(".py")
        if not path.is_file():
            spec = importlib.util.find_spec(hooks)
            if spec is None or not spec.origin:
                raise RbacError(
                    f"hook module {hooks!r}: not found next to the watches file nor on the Python path"
                )
            path = Path(spec.origin)
    if not path.is_file():
        raise RbacError(f"{path}: hook file not found")
    out: dict[str, str] = {}
    pending = [(str(path), path)]
    while pending:
        label, file = pending.pop()
        if label in out:
            continue
        out[label] = file.read_text()
        for module in rbac.hook_uses(out[label], label)[1]:
            spec = importlib.util.find_spec(module)
            if spec is not None and spec.origin:
                pending.append((module, Path(spec.origin)))
    return sorted(out.items())


def chart_lookups(chart: ChartRef) -> frozenset[tuple[str, str]]:
    """Kinds a local chart reads with ``lookup`` (remote charts are not unpacked here)."""
    if chart.path is None or not chart.path.is_dir():
        return frozenset()
    found: set[tuple[str, str]] = set()
    for template in sorted(chart.path.rglob("templates/*")):
        if template.is_file():
            found |= rbac.lookups_in(template.read_text(errors="replace"))
    return frozenset(found)


def yaml_documents(folder: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every YAML document of the ``*.yaml``/``*.yml`` files in a folder, with its file."""
    out: list[tuple[Path, dict[str, Any]]] = []
    if not folder.is_dir():
        return out
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError as exc:
            raise RbacError(f"{path}: invalid YAML: {exc}") from None
        out += [(path, d) for d in docs if isinstance(d, dict)]
    return out


def load_project_watches(path: Path) -> list[Watch]:
    """The watches, where an empty list (a project fresh from ``helm-operator init``) is allowed."""
    try:
        if yaml.safe_load(path.read_text()) in (None, []):
            return []
    except (OSError, yaml.YAMLError):
        pass  # load_watches says what is wrong, with the file
    return load_watches(path)  # WatchesError names the file, entry and field


def identity_from(project: Path, name: str | None, namespace: str | None) -> Identity:
    """Whom the rules bind: flags first, else the ServiceAccount in ``config/``, else defaults."""
    found: dict[str, Any] = {}
    sa_file = project / SERVICE_ACCOUNT_FILE
    for _, doc in yaml_documents(sa_file.parent) if sa_file.is_file() else []:
        if doc.get("kind") == "ServiceAccount":
            found = doc.get("metadata") or {}
            break
    default = Identity()
    sa_name = str(found.get("name") or default.service_account)
    return Identity(
        name=name or sa_name,
        namespace=namespace or str(found.get("namespace") or default.namespace),
        service_account=name or sa_name,
    )


def discovery_resolver(kubeconfig: str) -> rbac.Resolve:
    """How the API server behind ``kubeconfig`` serves each kind (one discovery, then cached)."""
    from kubernetes import client, config

    from helm_operator.adapters.discovery import Discovery

    cfg = client.Configuration()
    try:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        discovery = Discovery(client.ApiClient(cfg), max_age=3600)
        discovery.refresh()
    except Exception as exc:  # a bad file or an unreachable server: the user asked for discovery
        raise RbacError(f"API discovery through {kubeconfig} failed: {exc}") from None

    def resolve(api_version: str, kind: str) -> ApiResource | None:
        group, _, version = api_version.rpartition("/")
        served = discovery.find(group, version, kind)
        return ApiResource(served.group, served.plural, served.namespaced) if served else None

    return resolve


@dataclass(frozen=True)
class Options:
    watches_file: Path
    helm: str = "helm"
    samples: Path | None = None  # default: samples/ beside the watches file
    crds: Path | None = None  # default: crds/ beside the watches file
    values: Sequence[tuple[str, Path]] = ()  # (kind, values file) rendered in addition
    extra_rules: Path | None = None
    kubeconfig: str | None = None
    escalate: bool = False
    namespace_scoped: bool = False
    watch_namespaces: Sequence[str] = ()
    name: str | None = None
    namespace: str | None = None
    controller_ring: str | None = None  # also the ControllerRing of the watched kinds (dynamic shards)
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


def _watched(watches: Sequence[Watch], options: Options, base: Path) -> list[WatchedKind]:
    samples: dict[tuple[str, str], list[tuple[Path, dict[str, Any]]]] = {}
    for path, doc in yaml_documents(options.samples or base / "samples"):
        samples.setdefault((str(doc.get("apiVersion")), str(doc.get("kind"))), []).append((path, doc))
    known = {w.kind for w in watches}
    for kind, file in options.values:
        if kind not in known:
            raise RbacError(
                f"--values {kind}={file}: no watch serves kind {kind!r} (known: {', '.join(sorted(known))})"
            )
    out = []
    for w in watches:
        overrides = w.override_values
        renders = [RenderInput("defaults", user_values({}, overrides))]
        for path, doc in samples.get((w.api_version, w.kind), []):
            name = str((doc.get("metadata") or {}).get("name") or "release-name")
            spec = user_values(doc.get("spec") or {}, overrides)
            renders.append(RenderInput(f"sample {_rel(path, base)}", spec, name))
        for kind, file in options.values:
            if kind == w.kind:
                try:
                    extra = yaml.safe_load(file.read_text()) or {}
                except (OSError, yaml.YAMLError) as exc:
                    raise RbacError(f"--values {kind}={file}: {exc}") from None
                if not isinstance(extra, dict):
                    raise RbacError(f"--values {kind}={file}: expected a mapping of values")
                renders.append(RenderInput(f"values {file}", user_values(extra, overrides)))
        for chart in _served(w):  # every version served renders
            out.append(
                WatchedKind(
                    api_version=w.api_version,
                    kind=w.kind,
                    chart=_label(chart, base),
                    renders=renders,
                    plural=w.plural,
                    namespaced=None if w.scope is None else w.scope == "Namespaced",
                    hook_sources=read_hook_sources(w.hooks, base) if w.hooks else (),
                    lookups=chart_lookups(chart),
                )
            )
    return out


def _served(w: Watch) -> list[ChartRef]:
    """Every chart version the watch serves (one without ``charts:``)."""
    return [ref for _, ref in w.versions] or [w.chart]


def _label(chart: ChartRef, base: Path) -> str:
    return _rel(chart.path, base) if chart.path is not None else chart.ref


def _rel(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class Generated:
    """The RBAC manifests for a project, whom they bind, and what a reader must be told."""

    docs: list[dict[str, Any]]
    identity: Identity
    notes: list[str]


def generate(options: Options) -> tuple[list[dict[str, Any]], Identity]:
    """The RBAC manifests for a project, and whom they bind."""
    out = generate_project(options)
    return out.docs, out.identity


def generate_project(options: Options) -> Generated:
    """The RBAC manifests for a project, whom they bind, and notes on cluster-wide grants."""
    base = options.watches_file.resolve().parent
    watches = load_project_watches(options.watches_file)
    watched = _watched(watches, options, base)
    charts = {  # every version a watch serves, by the name WatchedKind gives it
        (w.api_version, w.kind, _label(ref, base)): ref for w in watches for ref in _served(w)
    }
    namespaces = {(w.api_version, w.kind): w.release_namespace for w in watches}

    def render(w: WatchedKind, how: RenderInput) -> list[dict[str, Any]]:
        ns = namespaces[(w.api_version, w.kind)] or "default"
        chart = charts[(w.api_version, w.kind, w.chart)]
        return helm_template(options.helm, chart, how.release, ns, how.values, f"{w.chart} ({how.label})")

    crds = rbac.crd_resources(d for _, d in yaml_documents(options.crds or base / "crds"))
    extra: list[rbac.Grant] = []
    if options.extra_rules is not None:
        try:
            data = yaml.safe_load(options.extra_rules.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise RbacError(f"{options.extra_rules}: {exc}") from None
        extra = rbac.parse_extra_rules(data, str(options.extra_rules))
    resolve: rbac.Resolve = (
        discovery_resolver(options.kubeconfig) if options.kubeconfig else (lambda a, k: None)
    )
    derived = rbac.derive(watched, render, resolve, crds, extra, options.escalate)
    identity = identity_from(base, options.name, options.namespace)
    scoped: list[str] | None = None
    if options.namespace_scoped:
        release_namespaces = [n for n in namespaces.values() if n]
        scoped = [*(options.watch_namespaces or [identity.namespace]), *release_namespaces]
    docs = rbac.manifests(derived.grants, identity, scoped)
    if options.controller_ring:
        ring = _ring_resources(watches, crds)  # one per watch, in order
        controlled: dict[rbac.ApiResource, set[rbac.ApiResource]] = {}
        for w, r in zip(watches, ring, strict=True):
            controlled.setdefault(r, set()).update(derived.controlled.get((w.api_version, w.kind), set()))
        docs += rbac.controller_ring(options.controller_ring, ring, identity, controlled)
    return Generated(docs, identity, derived.notes())


def _ring_resources(
    watches: Sequence[Watch], crds: Mapping[tuple[str, str], rbac.ApiResource]
) -> list[rbac.ApiResource]:
    """The watched kinds as the API serves them (group and plural), from crds/ or watches.yaml."""
    found = []
    for w in watches:
        known = crds.get((w.group, w.kind))
        plural = w.plural or (known.plural if known else None)
        if plural is None:
            raise RbacError(
                f"the ControllerRing needs the plural of {w.kind} ({w.api_version}): put its CRD in "
                "crds/ or set plural in watches.yaml"
            )
        found.append(rbac.ApiResource(w.group, plural, w.scope != "Cluster"))
    return found
