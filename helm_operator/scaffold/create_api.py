"""``helm-operator create-api``: serve a new kind from a chart, and keep CRDs in step with charts.

Adds to an operator project the chart (copied, or pulled with ``helm pull``, under
``charts/<kind>``), a watches.yaml entry, a sample resource and the CustomResourceDefinition whose
``spec`` schema is generated from the chart (see :mod:`helm_operator.scaffold.crd`). The same
generation rewrites the CRDs of existing entries when their charts change (``--regenerate-crd``),
so CRD and chart never drift apart. Everything is checked before the first file is written: a
mistake leaves the project as it was.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from helm_operator.config.charts import ChartRef
from helm_operator.config.watches import Watch, WatchesError, load_watches
from helm_operator.hooks.conversion import Kind, missing
from helm_operator.hooks.loader import load
from helm_operator.scaffold import crd, watchfile

REGENERATE = "helm-operator create-api --regenerate-crd"


class ApiError(Exception):
    """Bad input (exit code 2) or a failed helm call (exit code 1); the message names the file,
    flag or field."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ChartSource:
    """What the CRD is made from: a chart's metadata, defaults and schema."""

    path: Path
    name: str
    description: str | None
    defaults: dict[str, Any]
    schema: Mapping[str, Any] | None


@dataclass(frozen=True)
class Entry:
    """One served version of a kind, as a watches entry says (or will say)."""

    group: str
    version: str
    kind: str
    chart: ChartSource
    label: str  # the chart as the watches file names it, for the CRD's header
    plural: str | None = None
    scope: str | None = None


@dataclass(frozen=True)
class Request:
    group: str
    version: str
    kind: str
    chart: str
    project: Path = Path(".")
    watches_file: str = "watches.yaml"
    crd_dir: str = "crds"
    repo: str | None = None
    chart_version: str | None = None
    plural: str | None = None
    short_names: tuple[str, ...] = ()
    cluster_scoped: bool = False
    release_namespace: str | None = None
    helm: str = "helm"
    allow_cluster_scoped: bool = False  # the entry's allowClusterScoped (ClusterRoles, crds/ …)


@dataclass
class Outcome:
    written: list[Path] = field(default_factory=list)
    unchanged: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # worth saying, not wrong


# Kinds that are cluster-scoped wherever Kubernetes serves them: a chart whose templates name one
# (or that has a crds/ folder) needs allowClusterScoped for a namespaced kind.
_CLUSTER_KINDS = re.compile(
    r"^kind:\s*(ClusterRole|ClusterRoleBinding|CustomResourceDefinition|Namespace|PriorityClass|"
    r"StorageClass|IngressClass|PersistentVolume|ValidatingWebhookConfiguration|"
    r"MutatingWebhookConfiguration|APIService|RuntimeClass|CSIDriver)\s*$",
    re.M,
)


def cluster_scoped_hints(chart_dir: Path) -> list[str]:
    """What in a chart looks cluster-scoped: its crds/ folders and template kinds (a hint from
    the text; the operator's post-renderer decides on what is really rendered)."""
    found: set[str] = set()
    for path in sorted(chart_dir.rglob("*")):
        if not path.is_file() or path.suffix not in (".yaml", ".yml", ".json", ".tpl"):
            continue
        rel = path.relative_to(chart_dir).parts
        if "crds" in rel[:-1]:
            found.add("CustomResourceDefinition (crds/)")
        elif "templates" in rel[:-1]:
            found.update(_CLUSTER_KINDS.findall(path.read_text(errors="replace")))
    return sorted(found)


# --- charts ------------------------------------------------------------------------------------


def _chart_files(path: Path) -> dict[str, bytes]:
    """Chart.yaml, values.yaml and values.schema.json of a chart directory or packaged .tgz."""
    wanted = ("Chart.yaml", "values.yaml", "values.schema.json")
    if path.is_dir():
        return {name: (path / name).read_bytes() for name in wanted if (path / name).is_file()}
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar.getmembers():
                parts = member.name.split("/")
                if member.isfile() and len(parts) == 2 and parts[1] in wanted:
                    fh = tar.extractfile(member)
                    if fh is not None:
                        found[parts[1]] = fh.read()
    except (OSError, tarfile.TarError) as exc:
        raise ApiError(f"{path}: not a packaged chart (.tgz): {exc}") from None
    return found


def read_chart(path: Path) -> ChartSource:
    """Read a local chart; errors name the file and what is wrong with it."""
    files = _chart_files(path)
    if "Chart.yaml" not in files:
        raise ApiError(f"{path}: no Chart.yaml: not a Helm chart")
    try:
        meta = yaml.safe_load(files["Chart.yaml"]) or {}
    except yaml.YAMLError as exc:
        raise ApiError(f"{path / 'Chart.yaml'}: invalid YAML: {exc}") from None
    try:
        defaults = yaml.safe_load(files.get("values.yaml", b"")) or {}
    except yaml.YAMLError as exc:
        raise ApiError(f"{path / 'values.yaml'}: invalid YAML: {exc}") from None
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise ApiError(f"{path / 'Chart.yaml'}: expected a mapping with a 'name'")
    if not isinstance(defaults, dict):
        raise ApiError(f"{path / 'values.yaml'}: expected a mapping of values, got {type(defaults).__name__}")
    schema = None
    if "values.schema.json" in files:
        try:
            schema = json.loads(files["values.schema.json"])
        except json.JSONDecodeError as exc:
            where = f"line {exc.lineno} column {exc.colno}"
            raise ApiError(f"{path / 'values.schema.json'}: invalid JSON at {where}: {exc.msg}") from None
    return ChartSource(
        path=path,
        name=str(meta["name"]),
        description=str(meta["description"]) if meta.get("description") else None,
        defaults=defaults,
        schema=schema,
    )


def pull(ref: str, *, repo: str | None, version: str | None, helm: str, into: Path) -> Path:
    """``helm pull`` a remote chart (``oci://…``, or a name with ``--repo``) and unpack it."""
    cmd = [helm, "pull", ref, "--untar", "--untardir", str(into)]
    cmd += ["--repo", repo] if repo else []
    cmd += ["--version", version] if version else []
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except FileNotFoundError:
        raise ApiError(f"--helm: no helm executable {helm!r} (set --helm or $HELM_OPERATOR_HELM)") from None
    if proc.returncode != 0:
        where = f" from {repo}" if repo else ""
        raise ApiError(f"helm pull {ref}{where} failed: {proc.stderr.strip()}", code=1)
    charts = [d for d in into.iterdir() if (d / "Chart.yaml").is_file()]
    if len(charts) != 1:
        raise ApiError(f"helm pull {ref} left no single chart directory in {into}", code=1)
    return charts[0]


@contextmanager
def _local(chart: ChartRef, helm: str) -> Iterator[Path]:
    """A chart reference as a local path (remote charts are pulled into a temporary folder)."""
    if chart.path is not None:
        yield chart.path
        return
    with tempfile.TemporaryDirectory(prefix="helm-operator-pull-") as tmp:
        yield pull(chart.ref, repo=chart.repo, version=chart.version, helm=helm, into=Path(tmp))


def _install_chart(source: Path, dest: Path) -> None:
    """Copy a chart directory, or unpack a .tgz, to ``dest``."""
    if source.resolve() == dest.resolve():
        return
    if source.is_dir():
        shutil.copytree(source, dest, ignore=shutil.ignore_patterns(".git"))
        return
    with (
        tempfile.TemporaryDirectory(prefix="helm-operator-chart-") as tmp,
        tarfile.open(source, "r:gz") as tar,
    ):
        tar.extractall(tmp, filter="data")
        tops = [p for p in Path(tmp).iterdir() if (p / "Chart.yaml").is_file()]
        if len(tops) != 1:
            raise ApiError(f"{source}: expected one chart folder inside the archive")
        shutil.copytree(tops[0], dest)


# --- watches and existing CRDs -----------------------------------------------------------------


class _AnyEnv(Mapping[str, str]):
    """An environment in which every variable is set: overrideValues' ``$VARS`` do not matter
    for a CRD, so generating one must not need them."""

    def __getitem__(self, key: str) -> str:
        return ""

    def __contains__(self, key: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _watches(path: Path) -> list[Watch]:
    """The entries of a watches file; one without any (fresh from ``init``: ``[]``) has none."""
    if _raw_entries(path) == []:
        return []
    try:
        return load_watches(path, env=_AnyEnv())
    except WatchesError as exc:
        raise ApiError(str(exc)) from None


def _raw_entries(path: Path) -> list[Any]:
    if not path.exists():
        return []
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ApiError(f"{path}: invalid YAML: {exc}") from None
    if data is None:
        return []
    if not isinstance(data, list):
        raise ApiError(f"{path}: expected a list of watch entries")
    return data


def existing_crds(folder: Path) -> dict[tuple[str, str], tuple[Path, dict[str, Any]]]:
    """CustomResourceDefinitions in a folder, by (group, kind)."""
    found: dict[tuple[str, str], tuple[Path, dict[str, Any]]] = {}
    if not folder.is_dir():
        return found
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError as exc:
            raise ApiError(f"{path}: invalid YAML: {exc}") from None
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                spec = doc.get("spec") or {}
                found[(str(spec.get("group")), str((spec.get("names") or {}).get("kind")))] = (path, doc)
    return found


def _label(chart: ChartRef, base: Path) -> str:
    if chart.path is None:
        return f"{chart.ref} {chart.version or ''}".strip()
    return os.path.relpath(chart.path, base)


# --- the CRD -----------------------------------------------------------------------------------


def build(
    entries: Sequence[Entry],
    existing: Mapping[str, Any] | None = None,
    *,
    plural: str | None = None,
    short_names: Sequence[str] = (),
) -> crd.Crd:
    """The CRD serving every version of one kind. Names, scope, the storage version and versions no
    entry serves come from the CRD already on disk, unless an entry or a flag says otherwise."""
    first = entries[0]
    known = crd.identity_of(existing) if existing else None
    plural = next((e.plural for e in entries if e.plural), None) or plural
    plural = plural or (known.names.plural if known else "") or crd.plural_of(first.kind)
    names = crd.Names(
        kind=first.kind,
        plural=plural,
        singular=(known.names.singular if known else "") or first.kind.lower(),
        short_names=tuple(short_names) or (known.names.short_names if known else ()),
        categories=(known.names.categories if known else ()) or (crd.CATEGORY,),
    )
    served = [e.version for e in entries]
    kept = tuple(v for v in (known.versions if known else ()) if v.get("name") not in served)
    storage = known.storage_version if known and known.storage_version else served[0]
    if storage not in served and storage not in [v.get("name") for v in kept]:
        storage = served[0]
    versions = []
    for e in entries:
        try:
            spec = crd.spec_schema(e.chart.schema, e.chart.defaults, e.chart.name)
        except crd.SchemaError as exc:
            raise ApiError(f"{e.chart.path / 'values.schema.json'}: {exc}") from None
        versions.append(crd.Version(e.version, spec, storage=e.version == storage))
    return crd.Crd(
        group=first.group,
        names=names,
        description=crd.description_of(first.kind, first.chart.name, first.chart.description),
        versions=tuple(versions),
        scope=next((e.scope for e in entries if e.scope), None) or (known.scope if known else "Namespaced"),
        kept_versions=kept,
    )


def header(entries: Sequence[Entry]) -> list[str]:
    sources = [
        f"{e.version}: {e.label} ({'values.schema.json' if e.chart.schema is not None else 'values.yaml'})"
        for e in entries
    ]
    return [
        f"Generated by helm-operator from the chart's values - {'; '.join(sources)}.",
        f"Change the chart (values.schema.json, values.yaml), then run: {REGENERATE}",
    ]


def text_of(entries: Sequence[Entry], definition: crd.Crd) -> str:
    return crd.dump(crd.render(definition), header(entries))


# --- commands ----------------------------------------------------------------------------------


def regenerate(
    project: Path,
    watches_file: str = "watches.yaml",
    crd_dir: str = "crds",
    *,
    helm: str = "helm",
    check: bool = False,
) -> Outcome:
    """Rewrite the CRD of every kind in the watches file from its chart(s); ``check`` only tells
    which files would change."""
    watches_path = project / watches_file
    folder = project / crd_dir
    on_disk = existing_crds(folder)
    by_kind: dict[tuple[str, str], list[Watch]] = {}
    for w in _watches(watches_path):
        by_kind.setdefault((w.group, w.kind), []).append(w)
    outcome = Outcome()
    for (group, kind), watches in by_kind.items():
        entries = []
        for w in watches:
            with _local(w.chart, helm) as path:
                chart = read_chart(path)
            label = _label(w.chart, watches_path.parent)
            entries.append(Entry(group, w.version, kind, chart, label, w.plural, w.scope))
        found, doc = on_disk.get((group, kind), (None, None))
        definition = build(entries, doc)
        target = found or folder / definition.file_name
        text = text_of(entries, definition)
        if target.exists() and target.read_text() == text:
            outcome.unchanged.append(target)
            continue
        if not check:
            folder.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        outcome.written.append(target)
    return outcome


def create(req: Request) -> Outcome:
    """Add a kind served by a chart: chart, watches entry, sample, CRD. Nothing is written unless
    everything checks out."""
    project = req.project
    watches_path = project / req.watches_file
    plural = req.plural or crd.plural_of(req.kind)
    try:
        crd.check_names(req.group, req.version, req.kind, plural, req.short_names)
    except ValueError as exc:
        raise ApiError(str(exc)) from None
    if req.cluster_scoped and not req.release_namespace:
        raise ApiError("--cluster-scoped: a cluster-scoped kind needs --release-namespace for its releases")

    same_kind: list[int] = []  # the entries serving another version of the kind
    for i, entry in enumerate(_raw_entries(watches_path)):
        if not isinstance(entry, Mapping) or (entry.get("group", ""), entry.get("kind")) != (
            req.group,
            req.kind,
        ):
            continue
        if entry.get("version") == req.version:
            raise ApiError(
                f"{watches_path}: entry {i} already serves {req.group}/{req.version} {req.kind};"
                " choose another --version or --kind"
            )
        if "charts" in entry:
            raise ApiError(
                f"{watches_path}: entry {i} serves {req.kind} with several chart versions (charts:); "
                "add the API version by hand (docs/api-versions.md)"
            )
        same_kind.append(i)
    if len(same_kind) > 1:
        raise ApiError(
            f"{watches_path}: entries {', '.join(map(str, same_kind))} all serve {req.kind}; one entry per "
            "kind, its other versions converted to its own (docs/api-versions.md): merge them first"
        )
    # Another version of the kind: its chart and sample get the version in their names.
    others = (
        [w for w in _watches(watches_path) if (w.group, w.kind) == (req.group, req.kind)] if same_kind else []
    )
    stem = f"{req.kind.lower()}-{req.version}" if others else req.kind.lower()
    dest = project / "charts" / stem
    sample_path = project / "samples" / f"{stem}.yaml"
    crd_folder = project / req.crd_dir
    on_disk = existing_crds(crd_folder)
    crd_path, crd_doc = on_disk.get((req.group, req.kind), (None, None))
    if crd_path is not None and not others:
        raise ApiError(
            f"{crd_path}: already defines {req.kind} ({req.group}) but {watches_path} serves no version"
            " of it; remove the file or add its watches entry by hand"
        )
    if others:
        req = _as_served(req, crd_folder, crd_path, crd_doc)
    if sample_path.exists():
        raise ApiError(f"{sample_path}: already exists")

    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="helm-operator-pull-") as tmp:
        source = _source(req, dest, Path(tmp))
        chart = read_chart(source)
        label = os.path.relpath(dest, watches_path.parent)
        new = Entry(
            req.group,
            req.version,
            req.kind,
            chart,
            label,
            req.plural,
            "Cluster" if req.cluster_scoped else None,
        )
        # One entry per kind: a new version becomes the one that feeds the chart (the hub); the
        # CRD keeps serving (and storing) the versions it had, converted to it by the hooks.
        entries = [new]
        definition = build(entries, crd_doc, plural=req.plural, short_names=req.short_names)
        target = crd_path or crd_folder / definition.file_name
        taken = [p for (g, k), (p, _) in on_disk.items() if p == target and (g, k) != (req.group, req.kind)]
        if taken:
            raise ApiError(f"{target}: already holds the CRD of another kind")
        text = text_of(entries, definition)
        if same_kind:
            index = same_kind[0]
            watches_text = _with_values(watches_path, index, {"version": req.version, "chart": label})
            rendered = crd.render(definition)["spec"]["versions"]
            storage = next(v["name"] for v in rendered if v.get("storage"))
            served = sorted(str(v["name"]) for v in rendered if v.get("served"))
            old = others[0]
            notes.append(
                f"entry {index} of {watches_path} now feeds {label} from {req.version}; the CRD serves "
                f"{', '.join(served)} and stores {storage}. "
                + _converters_note(req, served, old.hooks, watches_path.parent)
                + f" {old.version}'s chart stays in {_label(old.chart, watches_path.parent)}"
                + " until you remove it"
            )
        else:
            index = None
            watches_text = _with_entry(watches_path, _entry(req, label))
        _check_watches(watches_path, watches_text, source, index)
        sample_text = _sample_text(req, chart, sample_path.relative_to(project), stem)
        if not req.cluster_scoped and not req.allow_cluster_scoped and source.is_dir():
            hints = cluster_scoped_hints(source)
            if hints:
                notes.append(
                    f"the chart may render cluster-scoped objects ({', '.join(hints)}): a resource of "
                    f"{req.kind} is refused them (ClusterScopedNotAllowed) unless its watches entry has "
                    "allowClusterScoped: true (create-api --allow-cluster-scoped writes it)"
                )

        # Everything is checked: from here on, only writes.
        _install_chart(source, dest)
    written = [dest]
    watches_path.parent.mkdir(parents=True, exist_ok=True)
    watches_path.write_text(watches_text)
    written.append(watches_path)
    sample_path.parent.mkdir(parents=True, exist_ok=True)
    sample_path.write_text(sample_text)
    written.append(sample_path)
    crd_folder.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    written.append(target)
    return Outcome(written=written, notes=notes)


def _read(chart: ChartRef, helm: str) -> ChartSource:
    with _local(chart, helm) as path:
        return read_chart(path)


def _source(req: Request, dest: Path, tmp: Path) -> Path:
    """The chart to install: a local path as given, or pulled into ``tmp``."""
    given = Path(req.chart).expanduser()
    if given.exists() and not req.repo:
        if given.is_dir() and not (given / "Chart.yaml").is_file():
            raise ApiError(f"--chart: {given} is a directory without Chart.yaml")
        if given.is_file() and not given.name.endswith((".tgz", ".tar.gz")):
            raise ApiError(f"--chart: {given} is neither a chart directory nor a packaged .tgz")
        if dest.exists() and given.resolve() != dest.resolve():
            raise ApiError(f"{dest}: already exists; remove it or pass it as --chart")
        return given
    if not (req.chart.startswith("oci://") or req.repo or "/" in req.chart):
        raise ApiError(
            f"--chart: no chart directory or .tgz at {given}; a chart name needs --repo URL,"
            " or use oci://… or a repo/name that helm knows"
        )
    if dest.exists():
        raise ApiError(f"{dest}: already exists; remove it or pass it as --chart")
    return pull(req.chart, repo=req.repo, version=req.chart_version, helm=req.helm, into=tmp)


def _entry(req: Request, chart: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"group": req.group, "version": req.version, "kind": req.kind, "chart": chart}
    if req.plural:
        entry["plural"] = req.plural
    if req.cluster_scoped:
        entry["scope"] = "Cluster"
        entry["releaseNamespace"] = req.release_namespace
    if req.allow_cluster_scoped:
        entry["allowClusterScoped"] = True
    return entry


def _with_entry(path: Path, entry: Mapping[str, Any]) -> str:
    """The watches file's new text: its comments kept, the entry added to its list."""
    try:
        return watchfile.add_entry(path.read_text() if path.exists() else "", entry, str(path))
    except watchfile.WatchFileError as exc:
        raise ApiError(str(exc)) from None


def _with_values(path: Path, index: int, values: Mapping[str, str]) -> str:
    """The watches file's new text: entry ``index``'s fields changed in place, comments kept."""
    try:
        return watchfile.set_values(path.read_text(), index, values, str(path))
    except watchfile.WatchFileError as exc:
        raise ApiError(str(exc)) from None


def _check_watches(path: Path, text: str, new_chart: Path, index: int | None = None) -> None:
    """The new watches text loads as the operator will load it. Checked on a copy whose local
    chart paths are absolute (the new or changed entry's chart, ``index``, default the last, is
    not in the project yet): nothing written."""
    entries = yaml.safe_load(text)
    changed = len(entries) - 1 if index is None else index
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("chart"), str):
            continue  # load_watches names what is wrong with it
        chart = entry["chart"]
        if i == changed:
            entry["chart"] = str(new_chart.resolve())
        elif not (chart.startswith("oci://") or entry.get("repo")):
            entry["chart"] = str((path.parent / chart).resolve())
    with tempfile.TemporaryDirectory(prefix="helm-operator-watches-") as tmp:
        copy = Path(tmp) / path.name
        copy.write_text(yaml.safe_dump(entries, sort_keys=False))
        try:
            load_watches(copy, env=_AnyEnv())
        except WatchesError as exc:
            raise ApiError(str(exc).replace(str(copy), str(path))) from None


def _as_served(req: Request, folder: Path, path: Path | None, doc: Mapping[str, Any] | None) -> Request:
    """A new version of a kind the project serves: the request as the CRD on disk has the kind
    (names and scope are the CRD's for good: the API server changes neither), or why not."""
    if path is None or doc is None:
        raise ApiError(
            f"{folder}: no CRD file defines {req.kind} ({req.group}), so the versions it serves and stores "
            f"are unknown; restore it (or write it from the watches file: create-api --regenerate-crd) "
            f"before adding {req.version}"
        )
    spec = doc.get("spec") or {}
    served = [str(v.get("name")) for v in spec.get("versions") or () if v.get("served")]
    if req.version in served:
        raise ApiError(
            f"{path}: {req.kind} already serves {req.version}; create-api --version adds a version it does "
            f"not serve yet (to feed the chart from {req.version} again, edit its watches entry)"
        )
    plural = str((spec.get("names") or {}).get("plural") or "")
    if req.plural and req.plural != plural:
        raise ApiError(
            f"--plural {req.plural}: {req.kind} is served as {plural} ({path}); a CRD's names stay what "
            "they are across versions: leave --plural out"
        )
    scope = str(spec.get("scope") or "Namespaced")
    if req.cluster_scoped and scope != "Cluster":
        raise ApiError(
            f"--cluster-scoped: {req.kind} is {scope} ({path}) and the API server never changes a CRD's "
            "scope; a new version keeps it: leave --cluster-scoped out"
        )
    return replace(req, plural=plural, cluster_scoped=scope == "Cluster")


def _converters_note(req: Request, served: Sequence[str], module: str | None, base: Path) -> str:
    """What the hook module still has to declare for every served version to reach the new hub
    version and back (the converters it already has are read from it)."""
    where = (
        f"its hook module {module}"
        if module
        else f"a hook module (add hooks: hooks/{req.kind.lower()}.py to the entry)"
    )
    declared: Mapping[tuple[str, str], Any] = {}
    unread = ""
    if module:
        try:
            declared = load(module, base).converters
        except Exception as exc:  # a module that does not load yet: everything is still to declare
            unread = f" ({module} did not load: {exc})"
    # The pairs with the hub: once those exist, any two versions convert through it.
    hub = Kind(req.group, req.kind, req.version, declared)
    pairs = sorted(p for p in missing(hub, served) if req.version in p)
    if not pairs:
        return f"{where} converts between every served version and {req.version}."
    return (
        f"Declare converters (@hooks.convert) in {where}{unread} for "
        + ", ".join(f"{a} -> {b}" for a, b in pairs)
        + " (each served version to and from the watch's version, "
        + req.version
        + "): until then the operator refuses to start, naming them (docs/api-versions.md)."
    )


def _sample_text(req: Request, chart: ChartSource, where: Path, stem: str | None = None) -> str:
    article = "An" if req.kind[:1] in "AEIOU" else "A"
    header = [
        f"{article} {req.kind} with the defaults of the {chart.name} chart: its spec is the chart's values."
    ]
    _, left_out = crd.without_nulls(chart.defaults)
    if left_out:
        shown = ", ".join(left_out[:8]) + (f" and {len(left_out) - 8} more" if len(left_out) > 8 else "")
        header.append(f"Values that are null by default are left out (kubectl apply drops nulls): {shown}.")
    header.append(f"Edit it, then: kubectl apply -f {where}")
    return crd.dump(crd.sample(req.group, req.version, req.kind, chart.defaults, stem), header)
