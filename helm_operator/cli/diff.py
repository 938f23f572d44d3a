"""``helm-operator diff``: what applying these custom resources would change, before ``kubectl apply``.

The resources are taken as the ``kubectl apply`` you will run would store them: client-side by
default, as kubectl does (``null``s are pruned), or with ``--server-side`` (and its
``--force-conflicts``, ``--field-manager``). Use the same flags as for the apply.

Exit codes follow diff(1): 0 nothing would change, 1 something would, 2 the preview failed (a bad
file, a kind no watch serves, values the chart rejects, a chart that does not render, an API
error, an apply the API server would refuse), with a message on stderr naming the file, document
and field or the object.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from helm_operator.cli.common import Refused, build_app, kubeconfig_path
from helm_operator.config.watches import Watch, WatchesError, load_watches, resolve
from helm_operator.hooks import conversion
from helm_operator.hooks.errors import HookLoadError
from helm_operator.hooks.loader import load_all
from helm_operator.preview.kubectl import Apply

EXIT_SAME, EXIT_CHANGED, EXIT_ERROR = 0, 1, 2


class InputError(ValueError):
    """A resource file that cannot be previewed: names the file, the document and the field."""


@dataclass(frozen=True)
class Wanted:
    """One resource of the file, matched to the watch that serves its kind."""

    watch: Watch
    doc: Mapping[str, Any]
    namespace: str  # the document's, else the command line's
    where: str  # "file: document N", for messages


def parse_resources(
    source: str,
    text: str,
    watches: Sequence[Watch],
    namespace: str | None,
    converted: Mapping[tuple[str, str], conversion.Kind] | None = None,
) -> list[Wanted]:
    """The custom resources of a YAML stream, each matched to its watch (by apiVersion and kind).
    ``namespace``: given on the command line (a document naming another one is an error, as with
    kubectl). ``converted``: the kinds whose hook modules declare converters; a document in another
    version of one is converted to the watch's, as the API server would through the operator's
    webhook. Raises :class:`InputError` on the first problem."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: invalid YAML: {exc}") from None
    served = {(w.api_version, w.kind): w for w in watches}
    found = []
    for index, doc in enumerate(docs, start=1):
        if doc is None:
            continue
        where = f"{source}: document {index}"
        if not isinstance(doc, dict):
            raise InputError(f"{where}: expected a Kubernetes object (a mapping), got {type(doc).__name__}")
        for field in ("apiVersion", "kind"):
            if not isinstance(doc.get(field), str) or not doc[field]:
                raise InputError(f"{where}: field '{field}': required (a non-empty string)")
        meta = doc.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            raise InputError(f"{where}: field 'metadata.name': required (a non-empty string)")
        if "spec" in doc and doc["spec"] is not None and not isinstance(doc["spec"], dict):
            raise InputError(f"{where}: field 'spec': expected a mapping, got {type(doc['spec']).__name__}")
        watch = served.get((doc["apiVersion"], doc["kind"]))
        group = doc["apiVersion"].rpartition("/")[0]
        kind = (converted or {}).get((group, doc["kind"]))
        if watch is None and kind is not None:
            watch = served.get((f"{group}/{kind.hub}" if group else kind.hub, doc["kind"]))
            try:
                doc = conversion.convert(kind, doc, kind.hub) if watch is not None else doc
            except conversion.ConversionError as exc:
                raise InputError(f"{where}: {exc}") from None
        if watch is None:
            known = ", ".join(f"{w.kind} ({w.api_version})" for w in watches)
            raise InputError(
                f"{where}: field 'kind': no watch serves {doc['kind']} ({doc['apiVersion']}); "
                f"watched: {known}"
            )
        own = meta.get("namespace")
        if own is not None and not isinstance(own, str):
            raise InputError(f"{where}: field 'metadata.namespace': expected a string")
        if own and namespace and own != namespace:
            raise InputError(
                f"{where}: field 'metadata.namespace': {own!r} does not match the namespace given "
                f"({namespace!r})"
            )
        found.append(Wanted(watch, doc, own or namespace or "", where))
    if not found:
        raise InputError(f"{source}: no resources in the file")
    return found


def _converted(watches: Sequence[Watch], base: Path) -> dict[tuple[str, str], conversion.Kind]:
    """The watched kinds whose hook modules declare converters (the watch's version the hub)."""
    return conversion.kinds(watches, load_all([(w.key, w.hooks) for w in watches if w.hooks], base))


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the file: {exc.strerror}") from None


def _context_namespace(kubeconfig: str | None) -> str:
    """The namespace of the kubeconfig's current context (kubectl's default), else ``default``."""
    from kubernetes import config

    if kubeconfig is None:
        token_ns = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        return token_ns.read_text().strip() if token_ns.is_file() else "default"
    try:
        _, active = config.list_kube_config_contexts(config_file=kubeconfig)
    except (config.ConfigException, OSError):
        return "default"
    return str((active or {}).get("context", {}).get("namespace") or "default")


def _resolved(app: Any, wanted: list[Wanted]) -> list[Wanted]:
    """Each resource's watch with the plural and scope the API server serves its kind under."""
    app.discovery.refresh()
    out = []
    for w in wanted:
        served = app.discovery.find(w.watch.group, w.watch.version, w.watch.kind)
        if served is None:
            raise InputError(
                f"{w.where}: field 'kind': the API server does not serve {w.watch.kind} "
                f"({w.watch.api_version}); is its CRD applied?"
            )
        out.append(Wanted(resolve(w.watch, served.plural, served.namespaced), w.doc, w.namespace, w.where))
    return out


def apply_of(args: argparse.Namespace) -> Apply:
    """The ``kubectl apply`` the user will run, from the flags named as kubectl names them."""
    if args.force_conflicts and not args.server_side:
        raise InputError("--force-conflicts only works with --server-side (as in kubectl apply)")
    return Apply(
        "server-side" if args.server_side else "client-side", args.field_manager, args.force_conflicts
    )


async def _preview_all(app: Any, wanted: list[Wanted], apply: Apply) -> tuple[list[Any], list[str]]:
    from helm_operator.runtime.previewer import Previewer, PreviewError, read_only_day2

    previewer = Previewer(app.runtime, read_only_day2(app.settings.hooks, app.kube), apply)
    previews, errors = [], []
    for w in wanted:
        try:
            previews.append(await previewer.resource(w.watch, w.doc, w.namespace))
        except PreviewError as exc:
            errors.append(f"{w.where}: {exc}")
    return previews, errors


def cmd_diff(args: argparse.Namespace) -> int:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from helm_operator.preview.report import report_json, report_text

    if not args.verbose:  # helm's command lines are logged, failures too: the report says it all
        logging.getLogger().setLevel(logging.WARNING)
        logging.getLogger("pyhelm3").setLevel(logging.ERROR)
    try:  # the file first: a mistake in it is reported without a cluster
        apply = apply_of(args)
        wanted: list[Wanted] = []
        watches = load_watches(args.watches_file)
        converted = _converted(watches, Path(args.watches_file).resolve().parent)
        for path in args.filename:
            wanted += parse_resources(path, _read(path), watches, args.namespace, converted)
    except WatchesError as exc:
        print(f"helm-operator diff: invalid watches file: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except HookLoadError as exc:
        print(f"helm-operator diff: invalid hooks: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except InputError as exc:
        print(f"helm-operator diff: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        app = build_app(args)
    except Refused:
        return EXIT_ERROR
    try:
        namespace = args.namespace or _context_namespace(kubeconfig_path(args.kubeconfig))
        wanted = _resolved(app, [Wanted(w.watch, w.doc, w.namespace or namespace, w.where) for w in wanted])
        previews, errors = asyncio.run(_preview_all(app, wanted, apply))
    except (InputError, WatchesError) as exc:
        print(f"helm-operator diff: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except (ApiException, HTTPError, OSError) as exc:  # unreachable, or refusing discovery
        print(f"helm-operator diff: API server error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        app.close()
    if previews:
        sys.stdout.write(report_json(previews) if args.output == "json" else report_text(previews))
    for error in errors:
        print(f"helm-operator diff: {error}", file=sys.stderr)
    if errors:
        return EXIT_ERROR
    return EXIT_CHANGED if any(p.changed for p in previews) else EXIT_SAME


def register(sub: Any) -> None:
    """Add ``diff`` to the main parser's subcommands."""
    p = sub.add_parser(
        "diff",
        help="show what applying custom resources would change (exit 0: nothing, 1: changes, 2: error)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        help="a YAML file of custom resources of watched kinds ('-': stdin); may repeat",
    )
    p.add_argument(
        "-n", "--namespace", default=None, help="for resources that name none (default: the context's)"
    )
    p.add_argument("--watches-file", default="watches.yaml", help="the watches file: kinds, charts and hooks")
    p.add_argument("--kubeconfig", default=None, help="default $KUBECONFIG, else in-cluster")
    p.add_argument("--helm", default=None, help="helm executable (default: $HELM_OPERATOR_HELM, else helm)")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.add_argument(
        "--server-side",
        action="store_true",
        help="the resources will be applied with kubectl apply --server-side (default: client-side)",
    )
    p.add_argument(
        "--force-conflicts",
        action="store_true",
        help="with --server-side: as kubectl apply --force-conflicts (take fields others manage)",
    )
    p.add_argument(
        "--field-manager",
        default=None,
        help="as kubectl apply --field-manager (default: kubectl's, kubectl-client-side-apply or kubectl)",
    )
    p.set_defaults(func=cmd_diff)
