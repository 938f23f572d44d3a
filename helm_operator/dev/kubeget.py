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
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import config

# Its own agent: audits that tell the operator's clients (kopf/, OpenAPI-Generator/) from the
# tests' kubectl see these reads as the tests'.
USER_AGENT = "kubectl-in-process (helm-operator dev)"
DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
REFRESH_GAP = 1.0  # seconds: a name still unknown this soon after a refresh goes to kubectl
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


@dataclass(frozen=True)
class ApiResource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    names: frozenset[str]  # plural, singular, lower-case kind, short names
    preferred: bool  # of its group's preferred version

    def path(self, namespace: str | None, name: str | None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        scope = f"/namespaces/{namespace}" if self.namespaced and namespace is not None else ""
        return f"{base}{scope}/{self.plural}" + (f"/{name}" if name is not None else "")

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def resources_of(discovered: Sequence[dict[str, Any]]) -> list[ApiResource]:
    """The resources of aggregated discovery documents (``/api``, ``/apis``), in their order."""
    found = []
    for doc in discovered:
        for group in doc.get("items") or ():
            name = (group.get("metadata") or {}).get("name") or ""
            for i, version in enumerate(group.get("versions") or ()):  # the preferred one first
                for r in version.get("resources") or ():
                    kind = (r.get("responseKind") or {}).get("kind") or ""
                    singular = r.get("singularResource") or ""
                    names = {r["resource"], singular, kind.lower(), *r.get("shortNames", ())}
                    found.append(
                        ApiResource(
                            name,
                            version["version"],
                            r["resource"],
                            kind,
                            r.get("scope") == "Namespaced",
                            frozenset(n for n in names if n),
                            i == 0,
                        )
                    )
    return found


def resolve(resources: Sequence[ApiResource], typed: str) -> ApiResource | None:
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
        self._resources: list[ApiResource] = []
        self._refreshed = float("-inf")

    def answer(
        self, args: Sequence[str], timeout: float, check: bool
    ) -> subprocess.CompletedProcess[str] | None:
        """kubectl's result for ``args``, or None: not served here (run kubectl)."""
        query = parse(args)
        if query is None or self._client() is None:
            return None
        resource = self._resource(query.resource, timeout)
        if resource is None or (query.name is not None and query.all_namespaces):
            return None
        if resource.namespaced and query.namespace is None and not query.all_namespaces:
            return None  # the kubeconfig context's namespace: kubectl knows it
        namespace = None if query.all_namespaces else query.namespace
        params = [(k, v) for k, v in (("labelSelector", query.labels), ("fieldSelector", query.fields)) if v]
        cmd = ["kubectl", *args]
        path = resource.path(namespace, query.name)
        status, data = self._get(path, params, "application/json", timeout, cmd)
        if status != 200:
            if status == 404 and query.name is None:
                return None  # a resource gone since discovery: kubectl's own words
            result = subprocess.CompletedProcess(cmd, 1, "", f"Error from server {_said(data)}\n")
            if check:
                raise subprocess.CalledProcessError(1, cmd, result.stdout, result.stderr)
            return result
        body = json.loads(data)
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
            return self._api

    def _get(
        self, path: str, params: list[tuple[str, str]], accept: str, timeout: float, cmd: list[str]
    ) -> tuple[int, bytes]:
        api = self._client()
        method, url, headers, _, _ = api.param_serialize(
            "GET", path, query_params=params, header_params={"Accept": accept}, auth_settings=["BearerToken"]
        )
        try:
            response = api.call_api(method, url, header_params=headers, _request_timeout=timeout)
            response.read()
        except urllib3.exceptions.TimeoutError:
            raise subprocess.TimeoutExpired(cmd, timeout) from None
        except urllib3.exceptions.HTTPError as exc:
            return 0, json.dumps({"reason": "Unreachable", "message": str(exc)}).encode()
        return int(response.status), bytes(response.data)

    def _resource(self, typed: str, timeout: float) -> ApiResource | None:
        with self._lock:
            known, age = self._resources, time.monotonic() - self._refreshed
        found = resolve(known, typed) if age < MAX_AGE else None
        if found is None and age > REFRESH_GAP:  # a CRD made since, or a version added
            docs = []
            for path in ("/api", "/apis"):
                status, data = self._get(path, [], DISCOVERY, timeout, ["kubectl", "api-resources"])
                if status != 200:
                    return None
                docs.append(json.loads(data))
            with self._lock:
                self._resources, self._refreshed = resources_of(docs), time.monotonic()
            found = resolve(self._resources, typed)
        return found


def _shown(obj: dict[str, Any]) -> dict[str, Any]:
    """As kubectl prints it: without ``managedFields`` (its ``--show-managed-fields=false``)."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


def _said(data: bytes) -> str:
    """kubectl's words for a failed request: ``(Reason): message``."""
    try:
        status = json.loads(data)
    except ValueError:
        return f"(Unknown): {data[:300]!r}"
    return f"({status.get('reason') or 'Unknown'}): {status.get('message') or ''}"
