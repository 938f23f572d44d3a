"""What the commands that talk to a cluster share: the kubeconfig they use and the application
built from the watches file and connection flags, refusing to start with a message on stderr."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from helm_operator.config.watches import WatchesError, load_watches

EXIT_CONFIG = 2


class Refused(Exception):
    """A start-up problem already reported on stderr; carries the exit code."""

    def __init__(self, code: int) -> None:
        self.code = code


def kubeconfig_path(explicit: str | None) -> str | None:
    """--kubeconfig, else $KUBECONFIG, else ~/.kube/config outside a cluster; None: in-cluster."""
    kubeconfig = explicit or os.environ.get("KUBECONFIG")
    if not kubeconfig and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        default = Path.home() / ".kube/config"
        kubeconfig = str(default) if default.is_file() else None
    return kubeconfig


def api_client(explicit: str | None) -> Any:
    """A kubernetes ApiClient from ``--kubeconfig`` (see :func:`kubeconfig_path`), else in-cluster."""
    from kubernetes import client, config

    cfg = client.Configuration()
    kubeconfig = kubeconfig_path(explicit)
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    return client.ApiClient(cfg)


class UserError(Exception):
    """Something the user must act on: printed as ``helm-operator: <message>``, exit 1."""


def reporting(func: Any) -> Any:
    """A command whose :class:`UserError` is printed on stderr with exit code 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            rc: int = func(args)
        except UserError as exc:
            print(f"helm-operator: {exc}", file=sys.stderr)
            return 1
        return rc

    return run


def build_app(args: argparse.Namespace, **settings: Any) -> Any:
    """The application for the watches file and connection flags (``--watches-file``,
    ``--kubeconfig``, ``--helm``) of ``run``, ``finalize`` and ``diff``. Raises :class:`Refused`."""
    from kubernetes import config

    from helm_operator.hooks.errors import HookLoadError
    from helm_operator.hooks.loader import load_all
    from helm_operator.runtime.app import App, Settings

    try:
        watches = load_watches(args.watches_file)
    except WatchesError as exc:
        print(f"helm-operator: invalid watches file: {exc}", file=sys.stderr)
        raise Refused(EXIT_CONFIG) from None
    helm = args.helm or os.environ.get("HELM_OPERATOR_HELM") or "helm"
    named = [(w.key, w.hooks) for w in watches if w.hooks]
    try:
        hooks = load_all(named, Path(args.watches_file).resolve().parent)
    except HookLoadError as exc:
        print(f"helm-operator: invalid hooks: {exc}", file=sys.stderr)
        raise Refused(EXIT_CONFIG) from None
    if shutil.which(helm) is None:  # every resource would fail with "exit status 127" otherwise
        where = (
            "--helm"
            if args.helm
            else "$HELM_OPERATOR_HELM"
            if os.environ.get("HELM_OPERATOR_HELM")
            else "PATH"
        )
        print(
            f"helm-operator: the helm executable {helm!r} ({where}) is not found or not executable; "
            "install helm 3 or 4, or name it with --helm or $HELM_OPERATOR_HELM",
            file=sys.stderr,
        )
        raise Refused(EXIT_CONFIG)
    kubeconfig = kubeconfig_path(args.kubeconfig)
    try:
        return App(Settings(watches=watches, kubeconfig=kubeconfig, helm=helm, hooks=hooks, **settings))
    except config.ConfigException as exc:
        print(f"helm-operator: no usable Kubernetes credentials: {exc}", file=sys.stderr)
        raise Refused(1) from None
    except Exception as exc:
        problem = api_unusable(exc)
        if problem is None:
            raise
        creds = kubeconfig or "the Pod's service account"
        print(f"helm-operator: {problem} (credentials: {creds})", file=sys.stderr)
        raise Refused(1) from None


def api_unusable(exc: BaseException) -> str | None:
    """What stopped the use of the API server, when ``exc`` says it could not be reached (refused,
    no route, a certificate that does not name its address) or refused the credentials. The
    application talks to it while it is built (discovery), so this is a start-up error said in one
    line; anything else is a bug and keeps its traceback."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError, MaxRetryError

    if isinstance(exc, MaxRetryError):
        pool = exc.pool
        where = f"{pool.scheme}://{pool.host}:{pool.port}" if pool is not None else str(exc.url)
        # urllib3 puts its connection object's repr before the reason: keep the reason.
        reason = re.sub(r"^<[^>]*>: ", "", str(exc.reason or exc))
        return f"cannot reach the Kubernetes API server at {where}: {reason}"
    if isinstance(exc, ApiException) and exc.status in (401, 403):
        return f"the Kubernetes API server refused the credentials: {exc.status} {exc.reason}"
    if isinstance(exc, HTTPError):
        return f"cannot reach the Kubernetes API server: {exc}"
    return None
