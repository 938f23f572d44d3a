"""The ``helm-operator`` command line."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from helm_operator import __version__
from helm_operator.cli.common import EXIT_CONFIG, Refused, build_app
from helm_operator.config.watches import WatchesError


def _shard(args: argparse.Namespace) -> str | None:
    """The static shard from ``--shard``/``--unsharded`` (None: not sharded); a bad name is a
    start-up refusal."""
    from helm_operator.config.sharding import UNSHARDED, shard_problem

    shard: str | None = UNSHARDED if args.unsharded else args.shard
    problem = shard_problem(shard) if shard is not None else None
    if problem:
        print(f"helm-operator: --shard: {problem}", file=sys.stderr)
        raise Refused(EXIT_CONFIG)
    return shard


def _ring(args: argparse.Namespace) -> Any:
    """This instance's shard of a ControllerRing (``--controller-ring``), or None; bad names are a
    start-up refusal."""
    from helm_operator.config.sharding import Ring

    if not args.controller_ring:
        return None
    ring = Ring(args.controller_ring, args.shard_name or socket.gethostname())
    for problem in ring.problems():
        print(f"helm-operator: {problem}", file=sys.stderr)
    if ring.problems():
        raise Refused(EXIT_CONFIG)
    return ring


def _serving(args: argparse.Namespace, shard: str | None, ring: Any = None) -> dict[str, Any]:
    """Endpoints and leader election from the flags; a bad value is a start-up refusal."""
    from helm_operator.config.sharding import lease_name
    from helm_operator.runtime.leader import LeaderSettings, default_namespace
    from helm_operator.runtime.probes import parse_bind

    try:
        metrics = parse_bind(args.metrics_bind_address, "--metrics-bind-address")
        probes = parse_bind(args.health_probe_bind_address, "--health-probe-bind-address")
    except ValueError as exc:
        print(f"helm-operator: {exc}", file=sys.stderr)
        raise Refused(EXIT_CONFIG) from None
    leader = None
    if ring is not None:  # its own Lease, named as the shard, in the ring: the sharder's contract
        leader = LeaderSettings(
            namespace=args.leader_election_namespace or default_namespace(),
            name=ring.shard,
            identity=ring.shard,
            labels={ring.LEASE_LABEL: ring.name},
            lease_duration=args.leader_election_lease_duration,
            renew_deadline=args.leader_election_renew_deadline,
            retry_period=args.leader_election_retry_period,
        )
    elif args.leader_elect:
        leader = LeaderSettings(
            namespace=args.leader_election_namespace or default_namespace(),
            # The replicas of one shard elect their leader among themselves.
            name=args.leader_election_id or lease_name("helm-operator", shard),
            lease_duration=args.leader_election_lease_duration,
            renew_deadline=args.leader_election_renew_deadline,
            retry_period=args.leader_election_retry_period,
        )
        for problem in leader.problems():
            print(f"helm-operator: {problem}", file=sys.stderr)
        if leader.problems():
            raise Refused(EXIT_CONFIG)
    return {"metrics_bind": metrics, "probes_bind": probes, "leader": leader, "conversion": _conversion(args)}


def _conversion(args: argparse.Namespace) -> Any:
    """Where the conversion webhook serves and how the API server reaches it (used when a hook
    module declares converters); a bad value is a start-up refusal."""
    from helm_operator.runtime.leader import default_namespace
    from helm_operator.runtime.probes import parse_bind
    from helm_operator.runtime.webhook import WebhookSettings

    try:
        bind = parse_bind(args.conversion_bind_address, "--conversion-bind-address")
    except ValueError as exc:
        print(f"helm-operator: {exc}", file=sys.stderr)
        raise Refused(EXIT_CONFIG) from None
    if bind is None:
        return None  # off: a hook module with converters is then a start-up error
    service = None
    if args.conversion_service:
        where, _, port = args.conversion_service.partition(":")
        ns, _, name = where.partition("/")
        if not ns or not name or (port and not port.isdigit()):
            print("helm-operator: --conversion-service: expected NAMESPACE/NAME[:PORT]", file=sys.stderr)
            raise Refused(EXIT_CONFIG)
        service = (ns, name, int(port or 443))
    ns, _, name = (args.conversion_secret or "").rpartition("/")
    return WebhookSettings(
        bind=bind,
        secret_namespace=ns or default_namespace(),
        secret_name=name or "helm-operator-conversion",
        service=service,
    )


def cmd_run(args: argparse.Namespace) -> int:
    from helm_operator.release.state import RetryPolicy
    from helm_operator.runtime import allocator

    allocator.limit_arenas()  # before any thread starts

    namespaces = [
        n for ns in (args.namespace or [os.environ.get("WATCH_NAMESPACE", "")]) for n in ns.split(",") if n
    ]
    try:
        shard, ring = _shard(args), _ring(args)
        app = build_app(
            args,
            namespaces=namespaces,
            max_helm_processes=args.max_helm_processes,
            retry=RetryPolicy(base=args.retry_base, cap=args.retry_cap, max_failures=args.max_retries),
            chart_cache=Path(args.chart_cache),
            shard=shard,
            ring=ring,
            **_serving(args, shard, ring),
        )
    except Refused as exc:
        return exc.code
    try:
        rc: int = app.run()
    except WatchesError as exc:  # the file contradicts what the API server serves
        print(f"helm-operator: invalid watches file: {exc}", file=sys.stderr)
        rc = EXIT_CONFIG
    from helm_operator.runtime.fence import exit_now

    exit_now(rc)  # the orderly stop is done (lease handed over, work folder gone)


def cmd_finalize(args: argparse.Namespace) -> int:
    """Finish the deletion of a resource when no operator runs: uninstall, then drop the finalizer."""
    from helm_operator.runtime.finalize import finish_stuck_deletion

    try:
        app = build_app(args)
    except Refused as exc:
        return exc.code
    if args.force:
        print(
            "helm-operator: WARNING: --force: the release is uninstalled even if the resource is not "
            "being deleted; the resource stays, and a running operator installs its release again",
            file=sys.stderr,
        )
    try:
        watches = app.resolve_watches()
        print(finish_stuck_deletion(app.runtime, watches, args.kind, args.name, args.namespace, args.force))
    except (ValueError, RuntimeError) as exc:
        print(f"helm-operator: {exc}", file=sys.stderr)
        return 1
    finally:
        app.close()
    return 0


def _real_node_images(refs: Sequence[str] | None = None) -> list[Path]:
    """The images the real node runs (default: every one; built once, cached by their inputs),
    imported at its start."""
    from helm_operator.dev import images

    return list(images.archives(refs, progress=lambda line: print(f"images: {line}", flush=True)).values())


def cmd_dev_up(args: argparse.Namespace) -> int:
    from helm_operator.dev import nodeconfig
    from helm_operator.dev.devcluster import DevCluster, wait_for_signal

    with DevCluster(
        args.name, nodes=args.nodes, real_node=args.real_node, images=_real_node_images
    ) as cluster:
        print(f"cluster {cluster.name} is ready")
        print(f"  export KUBECONFIG={cluster.kubeconfig}")
        print(cluster.kubectl("get", "nodes").stdout)
        if args.real_node:
            print(
                f"Node '{nodeconfig.NODE_NAME}' runs real containers; a Pod goes there with nodeSelector "
                f'{nodeconfig.LABEL}: "true" and a toleration of the taint {nodeconfig.TAINT_KEY}, '
                "and images named localhost/helm-operator/... (imagePullPolicy: Never)."
            )
        print("Ctrl-C stops it and removes everything it started.")
        sys.stdout.flush()
        wait_for_signal()
    return 0


def cmd_dev_demo(args: argparse.Namespace) -> int:
    """The main job on a laptop (``dev/demo.py``; ``--real``: the PostgreSQL sample's day-2 on the
    real node instead, ``dev/demo_real.py``)."""
    if args.real:
        from helm_operator.dev import demo_real

        return demo_real.run(
            name=args.name,
            nodes=args.nodes,
            watches_file=Path(args.watches_file),
            namespace=args.namespace,
            rows=args.rows,
            archives=lambda: _real_node_images(demo_real.IMAGES),
        )
    from helm_operator.dev import demo

    return demo.run(args.name, args.nodes, Path(args.watches_file), args.namespace, keep=args.keep)


def cmd_dev_reap(args: argparse.Namespace) -> int:
    from helm_operator.dev.devcluster import reap_orphans

    for name in reap_orphans():
        print(f"removed orphaned cluster {name}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="helm-operator", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    parser.add_argument("--version", action="version", version=f"helm-operator {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the operator for the kinds in a watches file")
    run.add_argument(
        "--watches-file", default="watches.yaml", help="the watches file: kinds, charts and hooks"
    )
    run.add_argument(
        "--namespace",
        action="append",
        help="namespace(s) to watch (repeat or comma-separate; default $WATCH_NAMESPACE or all)",
    )
    run.add_argument("--kubeconfig", default=None, help="default $KUBECONFIG, else in-cluster")
    run.add_argument(
        "--helm", default=None, help="helm executable (default: $HELM_OPERATOR_HELM, else helm on PATH)"
    )
    run.add_argument(
        "--max-helm-processes", type=int, default=4, help="global cap on concurrent helm processes"
    )
    run.add_argument("--retry-base", type=float, default=5.0, help="first retry delay after a failure (s)")
    run.add_argument("--retry-cap", type=float, default=300.0, help="longest retry delay (s)")
    run.add_argument("--max-retries", type=int, default=5, help="failures per spec before giving up")
    run.add_argument(
        "--chart-cache",
        default=str(Path.home() / ".cache/helm-operator/charts"),
        help="where remote charts (oci:// or repo) are pulled to",
    )
    run.add_argument(
        "--metrics-bind-address",
        default="0",
        help="serve Prometheus metrics on HOST:PORT or :PORT (all interfaces); 0 (default): off",
    )
    run.add_argument(
        "--conversion-bind-address",
        default="0.0.0.0:9444",
        help="HOST:PORT of the conversion webhook (served when a hook module declares converters)",
    )
    run.add_argument(
        "--conversion-service",
        default=None,
        help="NAMESPACE/NAME[:PORT] of the Service that reaches the webhook in a cluster "
        "(default: the API server calls https://127.0.0.1:PORT, the local control plane)",
    )
    run.add_argument(
        "--conversion-secret",
        default=None,
        help="[NAMESPACE/]NAME of the Secret holding the webhook's CA and certificate "
        "(default: helm-operator-conversion in the operator's namespace)",
    )
    run.add_argument(
        "--health-probe-bind-address",
        default="0",
        help="serve /healthz and /readyz on HOST:PORT or :PORT; 0 (default): off",
    )
    run.add_argument(
        "--leader-elect",
        action="store_true",
        help="run as one of several replicas: only the holder of a coordination.k8s.io Lease acts",
    )
    run.add_argument(
        "--leader-election-namespace",
        default=None,
        help="where the Lease lives (default $POD_NAMESPACE, else the service account's namespace)",
    )
    run.add_argument(
        "--leader-election-id",
        default=None,
        help="the Lease's name (default helm-operator; with a shard helm-operator-shard-NAME, "
        "unsharded helm-operator-unsharded)",
    )
    run.add_argument("--leader-election-lease-duration", type=int, default=15, help="seconds")
    run.add_argument("--leader-election-renew-deadline", type=int, default=10, help="seconds")
    run.add_argument("--leader-election-retry-period", type=int, default=2, help="seconds")
    sharding = run.add_mutually_exclusive_group()
    sharding.add_argument(
        "--shard",
        default=None,
        metavar="NAME",
        help="serve only the custom resources labelled sharding.helm-operator.io/shard=NAME "
        '(static sharding; "" is --unsharded)',
    )
    sharding.add_argument(
        "--controller-ring",
        metavar="RING",
        help="dynamic sharding: be one shard of this ControllerRing of the controller-sharding sharder "
        "(hold a Lease named --shard-name labelled with the ring, serve only the resources the sharder "
        "assigns to it, hand back those it drains); replaces --leader-elect",
    )
    sharding.add_argument(
        "--unsharded",
        action="store_true",
        help="serve only the custom resources without the sharding.helm-operator.io/shard label "
        "(beside instances started with --shard)",
    )
    run.add_argument(
        "--shard-name",
        default=None,
        help="with --controller-ring: this shard's name, its Lease's name and holderIdentity (default: "
        "the host name, i.e. the Pod's name)",
    )
    run.add_argument(
        "--log-format", choices=("text", "json"), default="text", help="json: one object per line"
    )
    run.set_defaults(func=cmd_run)

    fin = sub.add_parser(
        "finalize",
        help="uninstall a resource's release and remove the operator's finalizer (when no operator runs)",
    )
    fin.add_argument("kind", help="the kind, plural or plural.group of a watched resource")
    fin.add_argument("name", help="the resource's name")
    fin.add_argument("-n", "--namespace", default="default", help="the resource's namespace")
    fin.add_argument(
        "--watches-file", default="watches.yaml", help="the watches file: kinds, charts and hooks"
    )
    fin.add_argument("--kubeconfig", default=None, help="default $KUBECONFIG, else in-cluster")
    fin.add_argument("--helm", default=None, help="helm executable (default: $HELM_OPERATOR_HELM, else helm)")
    fin.add_argument(
        "--force",
        action="store_true",
        help="also when the resource is not being deleted (its release is uninstalled, the resource stays)",
    )
    fin.set_defaults(func=cmd_finalize)

    dev = sub.add_parser("dev", help="a local control plane built from source (KWOK nodes and a real one)")
    dev_sub = dev.add_subparsers(dest="dev_command", required=True)
    for name, func, help_ in (
        ("up", cmd_dev_up, "start a cluster and keep it running until Ctrl-C"),
        ("demo", cmd_dev_demo, "start a cluster, show it working, stop it"),
    ):
        p = dev_sub.add_parser(name, help=help_)
        p.add_argument("--name", default=None, help="cluster name (default: generated)")
        p.add_argument("--nodes", type=int, default=2, help="fake KWOK nodes")
        p.set_defaults(func=func)
        if name == "up":
            p.add_argument(
                "--real-node",
                action=argparse.BooleanOptionalAction,
                default=True,
                help="also one real node (kubelet, containerd; needs root) beside the fake ones",
            )
        if name == "demo":
            p.add_argument("--keep", action="store_true", help="keep everything running until Ctrl-C")
            p.add_argument(
                "--watches-file", default="watches.yaml", help="the watches file: kinds, charts and hooks"
            )
            p.add_argument("--namespace", default="demo", help="where the samples are applied")
            p.add_argument(
                "--real",
                action="store_true",
                help="on the real node: a PostgreSQLCluster's rows, backup, failover, restore, step by step",
            )
            p.add_argument("--rows", type=int, default=10_000, help="--real: rows written before the backup")
    reap = dev_sub.add_parser("reap", help="remove clusters whose owning process died")
    reap.set_defaults(func=cmd_dev_reap)

    from helm_operator.cli import api, diff, migrate, plan, project, rollout

    project.register(sub)  # init, rbac
    api.register(sub)  # create-api
    diff.register(sub)  # diff
    plan.register(sub)  # plan show|approve
    rollout.register(sub)  # rollout status|pause|resume|abort|crd
    migrate.register(sub)  # migrate-storage
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from helm_operator.runtime import logs

    logs.setup(logging.DEBUG if args.verbose else logging.INFO, getattr(args, "log_format", "text"))
    if args.command != "dev":
        try:
            rc: int = args.func(args)
            sys.stdout.flush()  # here, not at exit: a reader gone by now is caught below
        except BrokenPipeError:  # a report piped into `head`: end quietly, as a Unix tool does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit's flush
            return 0
        return rc
    from helm_operator.dev.devcluster import ClusterError
    from helm_operator.dev.tools import ToolsMissing

    try:
        rc = args.func(args)
    except (ToolsMissing, ClusterError) as exc:  # missing binaries, a cluster that did not start
        print(f"helm-operator: {exc}", file=sys.stderr)
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
