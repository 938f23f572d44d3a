"""``helm-operator init`` and ``helm-operator rbac``: start an operator project, derive its RBAC."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from helm_operator.config.sharding import Ring, shard_problem
from helm_operator.config.watches import WatchesError
from helm_operator.scaffold import init, rbac, sources

EXIT_CONFIG = 2

_RBAC_HELP = """\
Write the operator's ClusterRole/Role and bindings from what it will really do: every watched chart
is rendered with `helm template` (its defaults, each sample's spec from samples/, and --values
files), every rendered kind (Helm hooks and the chart's CRDs included) gets the verbs Helm uses,
plus read access to what Helm waits on beneath it (ReplicaSets, Pods, Jobs); hook modules are read
for the kinds they get, list, create, patch, delete or watch. Kinds are mapped to resources through
API discovery with --kubeconfig, else through crds/ and a built-in table of core kinds. Roles a
chart renders are held by the operator (Kubernetes refuses to let it grant what it does not hold).
No wildcards are ever written."""


def register(sub: Any) -> None:
    """Add ``init`` and ``rbac`` to the main parser's subparsers."""
    p = sub.add_parser("init", help="create a new operator project (watches, folders, config/, Dockerfile)")
    p.add_argument("directory", nargs="?", default=".", help="where (default: the current directory)")
    p.add_argument(
        "--name", help="operator name: Deployment, ServiceAccount, <name>-system (default: folder)"
    )
    p.add_argument("--image", help="image the Deployment runs (default: <name>:dev)")
    p.add_argument(
        "--shards",
        metavar="NAMES",
        help="static shards, comma-separated (e.g. a,b,c): a Deployment per shard running "
        "`run --shard NAME`, and one running `run --unsharded` for resources without the shard label",
    )
    p.add_argument(
        "--controller-ring",
        metavar="RING",
        help="dynamic shards: the replicas run `run --controller-ring RING` (each its own shard) "
        "instead of electing a leader",
    )
    p.add_argument("--force", action="store_true", help="overwrite files that already exist")
    p.set_defaults(func=cmd_init)

    r = sub.add_parser(
        "rbac", help="generate the operator's RBAC from its charts and hooks", description=_RBAC_HELP
    )
    r.add_argument("--watches-file", default="watches.yaml", help="the watches file: kinds, charts and hooks")
    r.add_argument("--out", help="file to write (default: standard output)")
    r.add_argument(
        "--namespace-scoped",
        action="store_true",
        help="namespaced permissions as a Role in each --watch-namespace (and releaseNamespace) only",
    )
    r.add_argument(
        "--watch-namespace",
        action="append",
        default=[],
        help="with --namespace-scoped: a namespace the operator serves (repeat; default its own)",
    )
    r.add_argument("--name", help="role and ServiceAccount name (default: config/01-service-account.yaml's)")
    r.add_argument(
        "--operator-namespace",
        help="where the operator runs (default: from config/, else helm-operator-system)",
    )
    r.add_argument(
        "--samples", help="sample resources rendered too (default: samples/ beside the watches file)"
    )
    r.add_argument("--crds", help="CRDs naming the project's kinds (default: crds/ beside the watches file)")
    r.add_argument(
        "--values",
        action="append",
        default=[],
        metavar="KIND=FILE",
        help="also render KIND's chart with FILE",
    )
    r.add_argument("--extra-rules", metavar="FILE", help="YAML list of PolicyRules to add (e.g. for hooks)")
    r.add_argument(
        "--controller-ring",
        metavar="RING",
        help="dynamic shards (`run --controller-ring RING`): also the ControllerRing of the watched kinds "
        "and the sharder's right to list and patch them",
    )
    r.add_argument(
        "--escalate",
        action="store_true",
        help="grant escalate/bind on roles instead of holding the charts' role permissions "
        "(needed for wildcard or aggregated chart roles; as strong as cluster-admin)",
    )
    r.add_argument("--kubeconfig", help="map kinds through this cluster's API discovery")
    r.add_argument("--helm", help="helm executable (default: $HELM_OPERATOR_HELM, else helm)")
    r.set_defaults(func=cmd_rbac)


def cmd_init(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    name = args.name or init.default_name(directory)
    shards = tuple(s.strip() for s in (args.shards or "").split(",") if s.strip())
    problems = [p for p in (shard_problem(s) for s in shards) if p]
    if problems or len(set(shards)) != len(shards):
        print(
            f"helm-operator init: --shards: {problems[0] if problems else 'a shard is named twice'}",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    if shards and args.controller_ring:
        print("helm-operator init: --shards and --controller-ring exclude each other", file=sys.stderr)
        return EXIT_CONFIG
    ring_problems = Ring(args.controller_ring, "x").problems() if args.controller_ring else []
    if ring_problems:
        print(f"helm-operator init: {ring_problems[0]}", file=sys.stderr)
        return EXIT_CONFIG
    project = init.Project(
        directory=directory,
        name=name,
        image=args.image or f"{name}:dev",
        shards=shards,
        ring=args.controller_ring,
    )
    try:
        written = init.write(project, force=args.force)
    except init.InitError as exc:
        print(f"helm-operator init: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    for path in written:
        print(f"wrote {path}")
    print(
        f"\nNext: add a kind with `helm-operator create-api ...`, then `{init.RBAC_COMMAND}`"
        f" (in {directory}) to derive the RBAC from its chart."
    )
    return 0


def _command(args: argparse.Namespace) -> str:
    """The command line that reproduces this output, for the generated file's header."""
    words = ["helm-operator", "rbac", "--watches-file", args.watches_file]
    for flag in ("namespace_scoped", "escalate"):
        if getattr(args, flag):
            words.append("--" + flag.replace("_", "-"))
    for flag in ("watch_namespace", "values"):
        for value in getattr(args, flag):
            words += ["--" + flag.replace("_", "-"), value]
    for flag in ("name", "operator_namespace", "samples", "crds", "extra_rules", "controller_ring", "out"):
        if getattr(args, flag):
            words += ["--" + flag.replace("_", "-"), getattr(args, flag)]
    return " ".join(words)


def _values(specs: list[str]) -> list[tuple[str, Path]]:
    out = []
    for spec in specs:
        kind, sep, file = spec.partition("=")
        if not sep or not kind or not file:
            raise rbac.RbacError(f"--values {spec!r}: expected KIND=FILE")
        out.append((kind, Path(file)))
    return out


def cmd_rbac(args: argparse.Namespace) -> int:
    try:
        options = sources.Options(
            watches_file=Path(args.watches_file),
            helm=args.helm or os.environ.get("HELM_OPERATOR_HELM") or "helm",
            samples=Path(args.samples) if args.samples else None,
            crds=Path(args.crds) if args.crds else None,
            values=_values(args.values),
            extra_rules=Path(args.extra_rules) if args.extra_rules else None,
            kubeconfig=args.kubeconfig,
            escalate=args.escalate,
            namespace_scoped=args.namespace_scoped,
            watch_namespaces=args.watch_namespace,
            name=args.name,
            namespace=args.operator_namespace,
            controller_ring=args.controller_ring,
        )
        generated = sources.generate_project(options)
        docs = generated.docs
        text = rbac.render_yaml(docs, _command(args), generated.notes)
    except WatchesError as exc:
        print(f"helm-operator rbac: invalid watches file: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except rbac.RbacError as exc:
        print(f"helm-operator rbac: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    for note in generated.notes:
        print(f"helm-operator rbac: note: {note}", file=sys.stderr)
    if args.escalate:
        print(
            "helm-operator rbac: warning: --escalate lets the operator grant any permission (escalate/bind)",
            file=sys.stderr,
        )
    if not args.out:
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(text)
    tmp.replace(out)
    kinds = ", ".join(f"{d['kind']} {d['metadata']['name']}" for d in docs)
    print(f"wrote {out}: {kinds}", file=sys.stderr)
    return 0
