"""``helm-operator create-api``: serve a new kind from a chart, or regenerate the CRDs of a project."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from helm_operator.scaffold.create_api import ApiError, Request, create, regenerate

_NEW_API_FLAGS = ("group", "version", "kind", "chart")


def register(sub: Any) -> None:
    """Add ``create-api`` to the main parser's subparsers."""
    p = sub.add_parser(
        "create-api",
        help="add a kind served by a chart (chart, watches entry, CRD from the chart's schema, sample)",
        description=(
            "Add a kind served by a chart to an operator project: the chart under charts/<kind>, a"
            " watches.yaml entry, a sample resource and a CRD whose spec schema is generated from the"
            " chart's values.schema.json (or inferred from values.yaml). With --regenerate-crd,"
            " rewrite the CRDs of the existing watches entries from their charts instead."
        ),
    )
    p.add_argument("--group", help="API group, e.g. cache.example.com")
    p.add_argument("--version", help="API version, e.g. v1alpha1")
    p.add_argument("--kind", help="kind, CamelCase, e.g. Memcached")
    p.add_argument("--chart", help="chart directory or .tgz, oci://…, or a chart name with --repo")
    p.add_argument("--repo", help="chart repository URL (with a chart name)")
    p.add_argument("--chart-version", help="version of a remote chart (default: the latest)")
    p.add_argument("--plural", help="resource name (default: the kind's English plural, lower case)")
    p.add_argument("--short-name", action="append", default=[], help="kubectl short name (repeatable)")
    p.add_argument("--cluster-scoped", action="store_true", help="a cluster-scoped kind (default namespaced)")
    p.add_argument("--release-namespace", help="where releases of a cluster-scoped kind go")
    p.add_argument(
        "--allow-cluster-scoped",
        action="store_true",
        help="let the chart create cluster-scoped objects (ClusterRoles, its crds/): allowClusterScoped",
    )
    p.add_argument("--project-dir", default=".", help="the operator project (default: .)")
    p.add_argument("--watches-file", default="watches.yaml", help="relative to the project")
    p.add_argument("--crd-dir", default="crds", help="relative to the project")
    p.add_argument("--helm", default=None, help="helm executable (default: $HELM_OPERATOR_HELM, else helm)")
    p.add_argument(
        "--regenerate-crd",
        action="store_true",
        help="rewrite the CRD of every watches entry from its chart (no new kind)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="with --regenerate-crd: write nothing, exit 1 if a CRD is out of date",
    )
    p.set_defaults(func=cmd_create_api)


def cmd_create_api(args: argparse.Namespace) -> int:
    helm = args.helm or os.environ.get("HELM_OPERATOR_HELM") or "helm"
    project = Path(args.project_dir)
    try:
        if args.regenerate_crd:
            return _regenerate(args, project, helm)
        if args.check:
            raise ApiError("--check: only with --regenerate-crd")
        missing = [f"--{name.replace('_', '-')}" for name in _NEW_API_FLAGS if not getattr(args, name)]
        if missing:
            raise ApiError(f"missing {', '.join(missing)} (or pass --regenerate-crd)")
        outcome = create(
            Request(
                group=args.group,
                version=args.version,
                kind=args.kind,
                chart=args.chart,
                project=project,
                watches_file=args.watches_file,
                crd_dir=args.crd_dir,
                repo=args.repo,
                chart_version=args.chart_version,
                plural=args.plural,
                short_names=tuple(args.short_name),
                cluster_scoped=args.cluster_scoped,
                release_namespace=args.release_namespace,
                helm=helm,
                allow_cluster_scoped=args.allow_cluster_scoped,
            )
        )
    except ApiError as exc:
        print(f"helm-operator create-api: {exc}", file=sys.stderr)
        return exc.code
    for path in outcome.written:
        print(f"wrote {path}")
    for note in outcome.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def _regenerate(args: argparse.Namespace, project: Path, helm: str) -> int:
    given = [f"--{n.replace('_', '-')}" for n in (*_NEW_API_FLAGS, "repo", "plural") if getattr(args, n)]
    if given or args.short_name or args.cluster_scoped or args.allow_cluster_scoped:
        drop = ", ".join(given) or "the kind flags"
        raise ApiError(f"--regenerate-crd takes the kinds from the watches file; drop {drop}")
    outcome = regenerate(project, args.watches_file, args.crd_dir, helm=helm, check=args.check)
    for path in outcome.unchanged:
        print(f"up to date {path}")
    for path in outcome.written:
        print(f"{'out of date' if args.check else 'wrote'} {path}")
    return 1 if args.check and outcome.written else 0
