"""``kubectl get … -o json`` answered in this process, for a local cluster's helpers.

The e2e suite looks at the cluster several times a second while it waits, and a kubectl process
for each look costs about a tenth of a CPU-second and a TLS handshake: thousands of them per run,
on the same two cores as the API servers and the operators under test. Here one connection pool
serves the plain forms (``get KIND [NAME]`` with ``-n``/``-A``, ``-l``, ``--field-selector`` and
``-o json``), with kubectl's output and exit status. Anything else, and any doubt about which
resource a name means, is left to kubectl itself (``answer`` returns None).
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import config
from kubernetes.client.exceptions import ApiException

from helm_operator.adapters.discovery import Discovery, ServedKind
from helm_operator.adapters.kube import request_json

T = TypeVar("T")

# Its own agent: audits that tell the operator's clients (kopf/, OpenAPI-Generator/) from the
# tests' kubectl see these reads as the tests'.
USER_AGENT = "kubectl-in-process (helm-operator dev)"
MAX_AGE = 10.0  # seconds a discovery is trusted (a CRD's preferred version can change)


@dataclass(frozen=True)
class Query:
    """What a plain ``kubectl get`` asks for."""

    resource: str  # as typed: plural, singular, kind, short name, optionally ``.version.group``
    name: str | None
    namespace: str | None  # None: the kubeconfig context's (a namespaced kind then goes to kubectl)
    all_namespaces: bool = False
    labels: str | None = None
    fields: str | None = None


_VALUED = {
    "-n": "namespace",
    "--namespace": "namespace",
    "-l": "labels",
    "--selector": "labels",
    "--field-selector": "fields",
    "-o": "output",
    "--output": "output",
}


def parse(args: Sequence[str]) -> Query | None:
    """The query of ``args`` (after ``kubectl``), or None: not a form served here."""
    if not args or args[0] != "get":
        return None
    found: dict[str, str] = {}
    words: list[str] = []
    all_namespaces = False
    rest = list(args[1:])
    while rest:
        arg = rest.pop(0)
        flag, eq, value = arg.partition("=")
        if arg in ("-A", "--all-namespaces"):
            all_namespaces = True
        elif flag in _VALUED and eq:
            found[_VALUED[flag]] = value
        elif arg in _VALUED and rest:
            found[_VALUED[arg]] = rest.pop(0)
        elif arg == "-ojson":
            found["output"] = "json"
        elif arg.startswith("-"):
            return None  # a flag this does not know: kubectl's
        else:
            words.append(arg)
    if found.get("output") != "json" or not words or len(words) > 2:
        return None
    resource, name = words[0], words[1] if len(words) == 2 else None
    if "/" in resource:  # kind/name
        if name is not None:
            return None
        resource, _, name = resource.partition("/")
    if "," in resource or not resource or name == "":
        return None
    namespace, labels, fields = found.get("namespace"), found.get("labels"), found.get("fields")
    return Query(resource, name, namespace, all_namespaces, labels, fields)


def resolve(resources: Iterable[ServedKind], typed: str) -> ServedKind | None:
    """The one resource ``typed`` names, as kubectl reads it; None when unknown or ambiguous."""
    word, _, qualifier = typed.lower().partition(".")
    named = [r for r in resources if word in r.names]
    if qualifier:
        version, _, group = qualifier.partition(".")
        exact = [r for r in named if r.version == version and r.group == group] if group else []
        named = exact or [r for r in named if r.group == qualifier and r.preferred]
    else:
        named = [r for r in named if r.preferred]
    groups = {r.group for r in named}
    if "" in groups:  # kubectl prefers the core group (``events``)
        named = [r for r in named if r.group == ""]
    return named[0] if len(named) == 1 else None


class InProcessGet:
    """Plain ``kubectl get -o json`` for one kubeconfig, over one pooled connection."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self._lock = threading.Lock()
        self._api: Any = None
        self._discovery: Discovery | None = None

    def answer(
        self, args: Sequence[str], timeout: float, check: bool
    ) -> subprocess.CompletedProcess[str] | None:
        """kubectl's result for ``args``, or None: not served here (run kubectl)."""
        query = parse(args)
        api = self._client() if query is not None else None
        if query is None or api is None:
            return None
        cmd = ["kubectl", *args]
        resource = self._resource(query.resource, timeout, cmd)
        if resource is None or (query.name is not None and query.all_namespaces):
            return None
        if resource.namespaced and query.namespace is None and not query.all_namespaces:
            return None  # the kubeconfig context's namespace: kubectl knows it
        namespace = None if query.all_namespaces else query.namespace
        params = [(k, v) for k, v in (("labelSelector", query.labels), ("fieldSelector", query.fields)) if v]
        path, accept = resource.path(namespace, query.name), {"Accept": "application/json"}
        try:
            body = _timed(cmd, timeout, request_json, api, "GET", path, params, accept, timeout)
        except ApiException as exc:
            if not exc.status or (exc.status == 404 and query.name is None):
                return None  # no answer, or a resource gone since discovery: kubectl's own words
            result = subprocess.CompletedProcess(cmd, 1, "", f"Error from server {_said(exc.body)}\n")
            if check:
                raise subprocess.CalledProcessError(1, cmd, result.stdout, result.stderr) from None
            return result
        except urllib3.exceptions.HTTPError:
            return None  # the server unreachable: kubectl's words and exit status
        if query.name is None:
            typed = {"apiVersion": resource.api_version, "kind": resource.kind}
            items = [_shown({**typed, **i}) for i in body.get("items") or ()]
            body = {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}
        else:
            body = _shown(body)
        return subprocess.CompletedProcess(cmd, 0, json.dumps(body, indent=4) + "\n", "")

    def _client(self) -> Any:
        """The API client, or None: the kubeconfig cannot be loaded (a cluster being removed has
        lost its certificates), and kubectl is left to say so as it does."""
        with self._lock:
            if self._api is None:
                try:
                    self._api = config.new_client_from_config(config_file=str(self.kubeconfig))
                except Exception:  # the loader's errors are many (files, YAML, contexts)
                    return None
                self._api.user_agent = USER_AGENT
                self._discovery = Discovery(self._api, max_age=MAX_AGE)
            return self._api

    def _resource(self, typed: str, timeout: float, cmd: list[str]) -> ServedKind | None:
        """What ``typed`` names, from discovery (asked again for a name it lacks: a CRD made since);
        None when unknown, ambiguous or discovery failed."""
        assert self._discovery is not None  # made with the client
        discovery = self._discovery
        with self._lock:
            discovery.timeout = timeout
            try:
                return _timed(cmd, timeout, discovery.lookup, lambda kinds: resolve(kinds, typed))
            except (ApiException, urllib3.exceptions.HTTPError, ValueError):
                return None


def _timed(cmd: list[str], timeout: float, call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, its request timing out as ``subprocess.run`` does."""
    try:
        return call(*args)
    except urllib3.exceptions.TimeoutError:
        raise subprocess.TimeoutExpired(cmd, timeout) from None


def _shown(obj: dict[str, Any]) -> dict[str, Any]:
    """As kubectl prints it: without ``managedFields`` (its ``--show-managed-fields=false``)."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


def _said(body: str | None) -> str:
    """kubectl's words for a failed request: ``(Reason): message``."""
    try:
        status = json.loads(body or "")
    except ValueError:
        return f"(Unknown): {(body or '')[:300]!r}"
    return f"({status.get('reason') or 'Unknown'}): {status.get('message') or ''}"
