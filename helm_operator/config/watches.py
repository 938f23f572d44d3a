"""Load and validate ``watches.yaml``: which custom resource kind is served by which chart.

The format is Operator SDK's Helm-operator format (``group``, ``version``, ``kind``, ``chart``,
``watchDependentResources``, ``overrideValues``, ``selector``, ``reconcilePeriod``,
``maxConcurrentReconciles``), accepted unchanged, plus fields of our own. Every mistake is reported
at start-up with the file, the entry and the field, and what was expected.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from helm_operator.config import maintenance, rollout, sharding
from helm_operator.config import versions as versions_mod
from helm_operator.config.charts import ChartRef, load_chart
from helm_operator.config.durations import parse_duration
from helm_operator.config.maintenance import Maintenance
from helm_operator.config.rollout import Policy as RolloutPolicy
from helm_operator.config.sharding import Ring, Shard

SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_ENV_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class WatchesError(ValueError):
    """A precise complaint about the watches file; the CLI exits with code 2 on it."""

    def __init__(self, path: Path | str, message: str, index: int | None = None, fieldname: str = "") -> None:
        where = str(path)
        if index is not None:
            where += f": entry {index}"
        if fieldname:
            where += f": field '{fieldname}'"
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class IgnoreRule:
    """A JSON pointer (prefix) to ignore, optionally only for one kind and/or name."""

    pointer: str
    kind: str | None = None
    name: str | None = None

    def matches(self, kind: str, name: str, path: str) -> bool:
        if self.kind and self.kind != kind:
            return False
        if self.name and self.name != name:
            return False
        return (
            path == self.pointer or path.startswith(self.pointer + "/") or path.startswith(self.pointer + "[")
        )


@dataclass(frozen=True)
class Watch:
    group: str
    version: str
    kind: str
    chart: ChartRef
    plural: str | None = None  # None: from API discovery at start-up (``resolve``)
    scope: Literal["Namespaced", "Cluster"] | None = None  # None: from API discovery
    release_namespace: str | None = None
    watch_dependent_resources: bool = True
    override_values: Mapping[str, Any] = field(default_factory=dict)
    selector: Mapping[str, Any] = field(default_factory=dict)
    reconcile_period: float = 60.0
    max_concurrent_reconciles: int = 1
    timeout: float = 300.0
    wait: bool = True
    history_max: int = 5
    rollback_on_failure: bool = True
    hooks: str | None = None
    drift_ignore: tuple[IgnoreRule, ...] = ()
    drift_trusted_managers: tuple[str, ...] = ()
    allowed_namespaces: tuple[str, ...] = ()  # namespaces (globs) a namespaced resource may reach
    allow_cluster_scoped: bool = False  # a namespaced resource may create cluster-scoped objects
    source: str = ""  # "watches.yaml: entry 2", for errors found after loading
    shard: Shard = None  # the instance's static shard (``sharded``); None: not sharded
    ring: Ring | None = None  # the instance's shard of a ControllerRing (``in_ring``); None: none
    approval: Literal["automatic", "manual"] = "automatic"  # manual: nothing applied unapproved
    # Several versions of the chart served side by side, oldest first (``charts:``); ``chart`` is
    # the newest. Empty: one chart (``chart:``).
    versions: tuple[tuple[str, ChartRef], ...] = ()
    maintenance: Maintenance = field(
        default_factory=Maintenance
    )  # when changes may be applied (no windows: any time)
    rollout: RolloutPolicy | None = None  # a change of the fleet's inputs goes wave by wave (None: at once)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def served_plural(self) -> str:
        """The plural the API server serves the kind under (after :func:`resolve`)."""
        assert self.plural is not None, f"{self.kind}: the watch was not resolved against the API"
        return self.plural

    @property
    def key(self) -> str:
        """A short identifier used in logs, metrics and handler ids."""
        return f"{self.kind}.{self.version}.{self.group}"


def expand_env(value: Any, env: Mapping[str, str], where: str = "") -> Any:
    """Expand ``$VAR`` / ``${VAR}`` in every string of a values tree. An unset variable is an error."""
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name = m.group(1) or m.group(2)
            if name not in env:
                raise KeyError(f"{where}: environment variable ${name} is not set")
            return env[name]

        return _ENV_REF.sub(sub, value)
    if isinstance(value, Mapping):
        return {k: expand_env(v, env, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, env, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


_LABEL_NAME = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _label_value_problem(value: str) -> str | None:
    """What makes this not a label value (the API server would refuse the selector), or None."""
    if len(value) > 63 or not _LABEL_NAME.fullmatch(value):
        return (
            f"{value!r} is not a label value (at most 63 characters: a-z, A-Z, 0-9, '-', '_', '.', "
            "beginning and ending with a letter or digit)"
        )
    return None


def _label_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if not name or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        return (
            f"{key!r} is not a label name (an optional DNS prefix and '/', then up to 63 of "
            "a-z, A-Z, 0-9, '-', '_', '.')"
        )
    if "/" in key and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return f"{key!r}: the prefix {prefix!r} is not a DNS subdomain"
    return None


def _validate_selector(sel: Any) -> str | None:
    """Return what is wrong with a label selector, or None."""
    if not isinstance(sel, Mapping):
        return "expected a label selector mapping with matchLabels and/or matchExpressions"
    unknown = set(sel) - {"matchLabels", "matchExpressions"}
    if unknown:
        return f"unknown selector keys {sorted(unknown)}; expected matchLabels, matchExpressions"
    labels = sel.get("matchLabels", {})
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        return "matchLabels: expected a mapping of label names to string values"
    for k, v in labels.items():
        problem = _label_key_problem(k) or _label_value_problem(v)
        if problem:
            return f"matchLabels.{k}: {problem}"
    exprs = sel.get("matchExpressions", [])
    if not isinstance(exprs, list):
        return "matchExpressions: expected a list"
    for i, e in enumerate(exprs):
        if not isinstance(e, Mapping) or not isinstance(e.get("key"), str):
            return f"matchExpressions[{i}]: expected a mapping with a string 'key'"
        op = e.get("operator")
        if op not in SELECTOR_OPERATORS:
            return (
                f"matchExpressions[{i}].operator: expected one of {', '.join(SELECTOR_OPERATORS)}, got {op!r}"
            )
        values = e.get("values", [])
        if op in ("In", "NotIn") and (not isinstance(values, list) or not values):
            return f"matchExpressions[{i}].values: operator {op} needs a non-empty list of values"
        problem = _label_key_problem(e["key"])
        if problem:
            return f"matchExpressions[{i}].key: {problem}"
        for j, v in enumerate(values if isinstance(values, list) else ()):
            problem = _label_value_problem(v) if isinstance(v, str) else "expected a string"
            if problem:
                return f"matchExpressions[{i}].values[{j}]: {problem}"
        if op in ("Exists", "DoesNotExist") and values:
            return f"matchExpressions[{i}].values: operator {op} takes no values"
    return None


@dataclass(frozen=True)
class EntryField:
    """One key a watches entry accepts, as a user reads about it: ``docs/watches.md`` is generated
    from :data:`FIELDS` (``make docs``), and the loader accepts exactly these keys, so the page and
    the parser cannot disagree on what exists."""

    name: str
    meaning: str  # Markdown, one sentence or a few
    default: str  # as written in the file; "required" where there is none
    sdk: bool = False  # part of Operator SDK's Helm-operator format (accepted unchanged)
    see: str = ""  # the page under docs/ (and anchor) that explains it in full


FIELDS: tuple[EntryField, ...] = (
    EntryField("group", "the API group of the custom resource served", "required (may be empty)", sdk=True),
    EntryField("version", "the API version of the custom resource served", "required", sdk=True),
    EntryField("kind", "the kind of the custom resource served (CamelCase)", "required", sdk=True),
    EntryField(
        "chart",
        "chart directory or packaged `.tgz` (relative to the watches file), or `oci://…` / a chart name "
        "with `repo` (remote charts need `chartVersion`; they are pulled once into `--chart-cache`)",
        "required (or `charts`)",
        sdk=True,
    ),
    EntryField(
        "watchDependentResources",
        "watch the objects a release creates (drift)",
        "`true`",
        sdk=True,
        see="drift.md",
    ),
    EntryField(
        "overrideValues",
        "values applied on top of the spec; `$VAR`/`${VAR}` expand from the environment (an unset "
        "variable is an error)",
        "`{}`",
        sdk=True,
    ),
    EntryField(
        "selector",
        "label selector (`matchLabels`, `matchExpressions`) choosing which resources this entry serves; "
        "sent to the API server, so the others never reach the operator (a resource labelled into it is "
        "served at once; one labelled out is left as it is, release and finalizer included, for whoever "
        "selects it)",
        "all",
        sdk=True,
    ),
    EntryField("reconcilePeriod", "periodic resync (`30s`, `5m`, `1h30m`)", "`1m`", sdk=True),
    EntryField("maxConcurrentReconciles", "reconciles of this kind running at once", "`1`", sdk=True),
    EntryField(
        "charts",
        "several versions of the chart side by side, in place of `chart`: a list of `{chart, version, repo}`",
        "",
        see="change-control.md#chart-versions-side-by-side",
    ),
    EntryField(
        "chartVersion",
        "the version of a remote chart (`oci://…` or with `repo`)",
        "required for remote charts",
    ),
    EntryField("repo", "the chart repository of a `chart` given by name", ""),
    EntryField(
        "releaseNamespace",
        "the namespace the releases of a cluster-scoped kind live in",
        "required for cluster-scoped kinds",
    ),
    EntryField(
        "plural",
        "the kind's plural; it comes from the API server (discovery) and, if written, must agree with it",
        "from discovery",
    ),
    EntryField(
        "scope",
        "`Namespaced` or `Cluster`; it comes from the API server (discovery) and, if written, must agree "
        "with it",
        "from discovery",
    ),
    EntryField("timeout", "Helm timeout", "`5m`"),
    EntryField("wait", "Helm waits for readiness", "`true`"),
    EntryField("historyMax", "revisions kept", "`5`"),
    EntryField(
        "upgrade",
        "`upgrade.rollbackOnFailure`: roll a failed upgrade back (then retry later)",
        "`{rollbackOnFailure: true}`",
    ),
    EntryField(
        "allowedNamespaces",
        'namespaces (names or globs such as `"team-*"`) a namespaced resource\'s release may put objects '
        "in besides its own",
        "`[]`",
        see="operating.md#tenancy",
    ),
    EntryField(
        "allowClusterScoped",
        "a namespaced resource's release may create cluster-scoped objects (and its chart's missing CRDs)",
        "`false`",
        see="operating.md#tenancy",
    ),
    EntryField(
        "driftIgnore",
        "`[{path, kind?, name?}]`: paths (a JSON pointer prefix) whose changes are not drift",
        "`[]`",
        see="drift.md",
    ),
    EntryField(
        "driftTrustedManagers",
        "field managers whose fields are theirs, not drift (`helm` cannot be trusted)",
        "`[]`",
        see="drift.md",
    ),
    EntryField(
        "hooks",
        "a Python module of day-2 hooks: a file relative to the watches file, or a module name",
        "none",
        see="day2-hooks.md",
    ),
    EntryField(
        "maintenance",
        "when changes may be applied: `windows` (cron, duration, time zone) and `driftOutsideWindows`",
        "any time",
        see="change-control.md#maintenance-windows",
    ),
    EntryField(
        "approval",
        "`manual`: nothing is installed or upgraded until a person has approved the exact change",
        "`automatic`",
        see="change-control.md#plan-and-approve",
    ),
    EntryField(
        "rollout",
        "in which waves the fleet takes a new chart or a change of `overrideValues`",
        "all at once",
        see="change-control.md#staged-rollouts",
    ),
)
_KNOWN_FIELDS = frozenset(f.name for f in FIELDS)


class _Entry:
    """One entry of a watches file as it is read: every mistake names the file, the entry and the
    field (``fail``), and each part of a ``Watch`` has a reader of its own."""

    def __init__(self, path: Path, index: int, raw: Mapping[str, Any]) -> None:
        self.path, self.index, self.raw = path, index, raw

    def fail(self, fieldname: str, message: str) -> WatchesError:
        return WatchesError(self.path, message, self.index, fieldname)

    def string(self, name: str, required: bool = False) -> str | None:
        value = self.raw.get(name)
        if value is None:
            if required:
                raise self.fail(name, "required field is missing")
            return None
        if not isinstance(value, str) or not value:
            raise self.fail(name, f"expected a non-empty string, got {value!r}")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self.raw.get(name, default)
        if not isinstance(value, bool):
            raise self.fail(name, f"expected true or false, got {value!r}")
        return value

    def integer(self, name: str, default: int, minimum: int) -> int:
        value = self.raw.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(name, f"expected an integer >= {minimum}, got {value!r}")
        return value

    def duration(self, name: str, default: float) -> float:
        if name not in self.raw:
            return default
        try:
            return parse_duration(self.raw[name])
        except ValueError:
            raise self.fail(
                name, f"expected a duration such as 30s, 5m or 1h30m, got {self.raw[name]!r}"
            ) from None

    def names(self, name: str, what: str) -> tuple[str, ...]:
        value = self.raw.get(name, []) or []
        if not isinstance(value, list) or not all(isinstance(n, str) and n for n in value):
            raise self.fail(name, f"expected a list of {what}")
        return tuple(value)

    def identity(self) -> tuple[str, str, str]:
        """group, version and kind."""
        group = self.raw.get("group", "")
        if not isinstance(group, str):
            raise self.fail("group", f"expected a string, got {group!r}")
        version = self.string("version", required=True)
        kind = self.string("kind", required=True)
        assert version is not None and kind is not None
        if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", kind):
            raise self.fail("kind", f"expected a CamelCase kind name, got {kind!r}")
        return group, version, kind

    def chart_at(self, where: str, chart_ref: str, chart_version: str | None, repo: str | None) -> ChartRef:
        if chart_ref.startswith("oci://") or repo:
            if not chart_version and where == "chart":
                raise self.fail("chartVersion", f"a remote chart ({chart_ref}) needs a pinned chartVersion")
            if not chart_version:
                raise self.fail(f"{where}.version", f"a remote chart ({chart_ref}) needs a pinned version")
            return ChartRef(ref=chart_ref, version=chart_version, repo=repo)
        chart_path = (self.path.parent / chart_ref).resolve()
        if chart_path.is_dir():
            if not (chart_path / "Chart.yaml").is_file():
                raise self.fail(where, f"{chart_path} is a directory without Chart.yaml")
        elif not (chart_path.is_file() and chart_path.name.endswith((".tgz", ".tar.gz"))):
            raise self.fail(where, f"no chart directory or .tgz at {chart_path}")
        return ChartRef(ref=str(chart_path), path=chart_path, version=chart_version)

    def charts(self) -> tuple[ChartRef, tuple[tuple[str, ChartRef], ...]]:
        """The chart a resource that pins nothing gets, and every version served side by side."""
        if self.raw.get("charts") is None:
            chart_ref = self.string("chart", required=True)
            assert chart_ref is not None
            return self.chart_at("chart", chart_ref, self.string("chartVersion"), self.string("repo")), ()
        if "chart" in self.raw:
            raise self.fail("charts", "give either 'chart' or 'charts' (several versions), not both")
        versions = _chart_versions(self.raw["charts"], self.chart_at, self.fail)
        return versions[-1][1], versions  # the newest serves a resource that pins nothing

    def overrides(self, env: Mapping[str, str]) -> Mapping[str, Any]:
        overrides = self.raw.get("overrideValues", {}) or {}
        if not isinstance(overrides, Mapping):
            raise self.fail("overrideValues", "expected a mapping of values")
        try:
            expanded: Mapping[str, Any] = expand_env(overrides, env)
        except KeyError as exc:
            raise self.fail("overrideValues", str(exc.args[0])) from None
        return expanded

    def selector(self) -> Mapping[str, Any]:
        selector = self.raw.get("selector", {}) or {}
        problem = _validate_selector(selector)
        if problem:
            raise self.fail("selector", problem)
        return selector

    def placement(self) -> tuple[Any, str | None, str | None]:
        """scope, releaseNamespace and plural."""
        scope = self.raw.get("scope")
        if scope not in (None, "Namespaced", "Cluster"):
            raise self.fail("scope", f"expected Namespaced or Cluster, got {scope!r}")
        release_namespace = self.string("releaseNamespace")
        if release_namespace and not _DNS_LABEL.match(release_namespace):
            raise self.fail(
                "releaseNamespace", f"expected a namespace name (DNS-1123 label), got {release_namespace!r}"
            )
        if scope == "Cluster" and not release_namespace:
            raise self.fail(
                "releaseNamespace", "a cluster-scoped kind needs a releaseNamespace for its releases"
            )
        plural = self.string("plural")
        if plural is not None and not _DNS_LABEL.match(plural):
            raise self.fail("plural", f"expected a lower-case resource name, got {plural!r}")
        return scope, release_namespace, plural

    def rollback_on_failure(self) -> bool:
        upgrade = self.raw.get("upgrade", {}) or {}
        if not isinstance(upgrade, Mapping) or set(upgrade) - {"rollbackOnFailure"}:
            raise self.fail("upgrade", "expected a mapping with only 'rollbackOnFailure'")
        rollback = upgrade.get("rollbackOnFailure", True)
        if not isinstance(rollback, bool):
            raise self.fail("upgrade.rollbackOnFailure", f"expected true or false, got {rollback!r}")
        return rollback

    def drift_ignore(self) -> tuple[IgnoreRule, ...]:
        rules = []
        raw_ignore = self.raw.get("driftIgnore", []) or []
        if not isinstance(raw_ignore, list):
            raise self.fail("driftIgnore", "expected a list of {path, kind?, name?}")
        for i, rule in enumerate(raw_ignore):
            if (
                not isinstance(rule, Mapping)
                or set(rule) - {"path", "kind", "name"}
                or not isinstance(rule.get("path"), str)
                or not rule["path"].startswith("/")
            ):
                raise self.fail(
                    f"driftIgnore[{i}]", "expected {path: /json/pointer, kind: optional, name: optional}"
                )
            rules.append(IgnoreRule(rule["path"], rule.get("kind"), rule.get("name")))
        return tuple(rules)

    def trusted_managers(self) -> tuple[str, ...]:
        trusted = self.names("driftTrustedManagers", "field manager names")
        if "helm" in trusted:
            raise self.fail(
                "driftTrustedManagers", "'helm' is the manager drift corrections use; it cannot be trusted"
            )
        return trusted

    def maintenance(self) -> Maintenance:
        if self.raw.get("maintenance") is None:
            return Maintenance()
        try:
            return maintenance.from_config(self.raw["maintenance"])
        except maintenance.WindowError as exc:
            raise self.fail(".".join(("maintenance", *exc.where)), exc.message) from None

    def approval(self) -> Any:
        approval = self.raw.get("approval", "automatic")
        if approval not in ("automatic", "manual"):
            raise self.fail("approval", f"expected automatic or manual, got {approval!r}")
        return approval

    def rollout(self) -> rollout.Policy | None:
        if self.raw.get("rollout") is None:
            return None
        try:
            return rollout.from_config(self.raw["rollout"], _validate_selector)
        except rollout.RolloutError as exc:
            raise self.fail(".".join(("rollout", *exc.where)), exc.message) from None


def _load_entry(path: Path, index: int, raw: Any, env: Mapping[str, str]) -> Watch:
    if not isinstance(raw, Mapping):
        raise WatchesError(path, f"expected a mapping, got {type(raw).__name__}", index)
    entry = _Entry(path, index, raw)
    unknown = sorted(set(raw) - _KNOWN_FIELDS)
    if unknown:
        raise entry.fail(unknown[0], f"unknown field; expected one of {', '.join(sorted(_KNOWN_FIELDS))}")
    group, version, kind = entry.identity()
    chart, versions = entry.charts()
    overrides = entry.overrides(env)
    selector = entry.selector()
    scope, release_namespace, plural = entry.placement()
    return Watch(
        group=group,
        version=version,
        kind=kind,
        chart=chart,
        plural=plural,
        scope=scope,
        release_namespace=release_namespace,
        watch_dependent_resources=entry.boolean("watchDependentResources", True),
        override_values=overrides,
        selector=selector,
        reconcile_period=entry.duration("reconcilePeriod", 60.0),
        max_concurrent_reconciles=entry.integer("maxConcurrentReconciles", 1, 1),
        timeout=entry.duration("timeout", 300.0),
        wait=entry.boolean("wait", True),
        history_max=entry.integer("historyMax", 5, 1),
        rollback_on_failure=entry.rollback_on_failure(),
        hooks=entry.string("hooks"),
        drift_ignore=entry.drift_ignore(),
        drift_trusted_managers=entry.trusted_managers(),
        allowed_namespaces=entry.names("allowedNamespaces", "namespace names or globs"),
        allow_cluster_scoped=entry.boolean("allowClusterScoped", False),
        maintenance=entry.maintenance(),
        approval=entry.approval(),
        rollout=entry.rollout(),
        versions=versions,
        source=f"{path}: entry {index}",
    )


def _chart_versions(raw: Any, chart_at: Any, fail: Any) -> tuple[tuple[str, ChartRef], ...]:
    """``charts: [{chart, version?, repo?}]``: each version once, a local chart's version read from
    its Chart.yaml when not given (and checked against it when given), sorted oldest first."""
    if not isinstance(raw, list) or not raw:
        raise fail("charts", "expected a non-empty list of {chart, version}")
    found: dict[str, ChartRef] = {}
    for i, item in enumerate(raw):
        where = f"charts[{i}]"
        if not isinstance(item, Mapping) or set(item) - {"chart", "version", "repo"} or not item.get("chart"):
            raise fail(where, "expected {chart: <path, oci:// or name>, version: <semver>, repo: <url>}")
        given = item.get("version")
        if given is not None and not isinstance(given, str):
            raise fail(f"{where}.version", f"expected a version string such as '1.2.0', got {given!r}")
        ref = chart_at(where, str(item["chart"]), given, item.get("repo"))
        version = given
        if ref.path is not None:
            own = load_chart(ref).version
            if given is not None and given != own:
                raise fail(f"{where}.version", f"{given!r}, but its Chart.yaml says {own!r}")
            version = own
        assert version is not None
        problem = versions_mod.problem(version)
        if problem:
            raise fail(f"{where}.version", problem)
        if version in found:
            raise fail(f"{where}.version", f"{version} is served twice")
        found[version] = replace(ref, version=version) if ref.path is None else ref
    return tuple(sorted(found.items(), key=lambda kv: versions_mod.key(kv[0])))


def load_watches(path: str | Path, env: Mapping[str, str] | None = None) -> list[Watch]:
    """Parse and validate a watches file; raise :class:`WatchesError` on the first problem."""
    path = Path(path)
    env = os.environ if env is None else env
    try:
        text = path.read_text()
    except OSError as exc:
        raise WatchesError(path, f"cannot read the file: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WatchesError(path, f"invalid YAML: {exc}") from None
    if not isinstance(data, list) or not data:
        raise WatchesError(path, "expected a non-empty list of watch entries")
    watches: list[Watch] = []
    seen: dict[tuple[str, str, str], int] = {}
    for index, raw in enumerate(data):
        watch = _load_entry(path, index, raw, env)
        gvk = (watch.group, watch.version, watch.kind)
        if gvk in seen:
            raise WatchesError(
                path,
                f"duplicate group/version/kind {watch.api_version} {watch.kind} (first in entry {seen[gvk]})",
                index,
                "kind",
            )
        seen[gvk] = index
        watches.append(watch)
    return watches


def selector_query(selector: Mapping[str, Any]) -> str:
    """A (validated) label selector in the API's query syntax (``labelSelector=``), so the API
    server, not the operator, leaves out what it does not select; same meaning as
    :func:`selector_matches`."""
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], ",".join(sorted(e.get("values") or ()))
        terms.append(
            {
                "In": f"{key} in ({values})",
                "NotIn": f"{key} notin ({values})",
                "Exists": key,
                "DoesNotExist": f"!{key}",
            }[op]
        )
    return ",".join(terms)


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Evaluate a (validated) label selector against an object's labels."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        present, value = e["key"] in labels, labels.get(e["key"])
        op = e["operator"]
        if (op == "In" and value not in e["values"]) or (op == "NotIn" and present and value in e["values"]):
            return False
        if (op == "Exists" and not present) or (op == "DoesNotExist" and present):
            return False
    return True


def sharded(watch: Watch, shard: Shard) -> Watch:
    """The watch as an instance serving ``shard`` runs it: its selector also requires the shard
    (so kopf's listing and watch, the start-up listing and the client-side check all see only the
    shard's resources), and its releases are labelled with it."""
    if shard is None:
        return watch
    selector = dict(watch.selector)
    selector["matchExpressions"] = [*(selector.get("matchExpressions") or ()), sharding.expression(shard)]
    return replace(watch, selector=selector, shard=shard)


def in_ring(watch: Watch, ring: Ring | None) -> Watch:
    """The watch as one shard of a ControllerRing runs it: its selector also requires the sharder's
    assignment to this shard (kopf's listing and watch, the start-up listing, the client side)."""
    if ring is None:
        return watch
    selector = dict(watch.selector)
    selector["matchExpressions"] = [*(selector.get("matchExpressions") or ()), ring.expression()]
    return replace(watch, selector=selector, ring=ring)


def resolve(watch: Watch, plural: str, namespaced: bool) -> Watch:
    """The watch with the plural and scope the API server serves its kind under.

    A ``plural`` or ``scope`` written in the file must agree with the server; a cluster-scoped kind
    needs ``releaseNamespace``. Raises :class:`WatchesError` naming the entry and field.
    """
    scope: Literal["Namespaced", "Cluster"] = "Namespaced" if namespaced else "Cluster"
    where = watch.source or watch.key
    if watch.plural is not None and watch.plural != plural:
        raise WatchesError(
            where,
            f"{watch.kind} is served as {plural!r} by the API server, not {watch.plural!r}",
            fieldname="plural",
        )
    if watch.scope is not None and watch.scope != scope:
        raise WatchesError(
            where, f"{watch.kind} is {scope} on the API server, not {watch.scope}", fieldname="scope"
        )
    if scope == "Cluster" and not watch.release_namespace:
        raise WatchesError(
            where,
            f"{watch.kind} is cluster-scoped: its releases need a releaseNamespace",
            fieldname="releaseNamespace",
        )
    return replace(watch, plural=plural, scope=scope)
