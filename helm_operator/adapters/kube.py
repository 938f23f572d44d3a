"""Thin, synchronous adapters over the kubernetes client. Call them through ``asyncio.to_thread``.

Reading live objects of a release, re-asserting them with server-side apply, writing a CR's status
and posting Events outside kopf handlers (for drift checks triggered by dependent watches).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from helm_operator.core.naming import HELM_FIELD_MANAGER

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObjectRef:
    api_version: str
    kind: str
    name: str
    namespace: str | None
    uid: str | None = None


def _body(resp: Any) -> dict[str, Any]:
    """A response read as plain JSON (``serialize=False``): the dynamic client's object tree, and
    its ``to_dict`` back, cost more CPU than the request itself for a Deployment."""
    body: dict[str, Any] = json.loads(resp.data)
    return body


def request_json(
    api: client.ApiClient,
    method: str,
    path: str,
    query: Sequence[tuple[str, str]] = (),
    headers: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """One raw API request and its JSON answer, for what the typed clients do not offer
    (aggregated discovery, any kind by its path); a non-2xx answer raises ``ApiException`` with
    the server's ``Status`` in its ``body``. ``timeout``: seconds for the whole request."""
    raw: Any = api
    method, url, header_params, payload, post_params = raw.param_serialize(
        method,
        path,
        query_params=list(query),
        header_params=dict(headers or {}),
        auth_settings=["BearerToken"],
    )
    resp = raw.call_api(method, url, header_params, payload, post_params, _request_timeout=timeout)
    resp.read()
    if not 200 <= resp.status <= 299:
        said = bytes(resp.data).decode(errors="replace")
        raise ApiException(status=resp.status, reason=f"{method} {path}: {said[:200]!r}", body=said)
    body: dict[str, Any] = json.loads(resp.data)
    return body


class Kube:
    """One dynamic client for the process; resources are discovered once and cached."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.dyn = dynamic.DynamicClient(api)
        self.core = client.CoreV1Api(api)

    def resource(self, api_version: str, kind: str) -> Any:
        return self.dyn.resources.get(api_version=api_version, kind=kind)

    def get(self, doc: Mapping[str, Any], namespace: str) -> dict[str, Any] | None:
        """The live counterpart of a manifest object; None where it does not exist."""
        meta = doc.get("metadata") or {}
        res = self.resource(str(doc["apiVersion"]), str(doc["kind"]))
        ns = (meta.get("namespace") or namespace) if res.namespaced else None
        try:
            return _body(res.get(name=meta["name"], namespace=ns, serialize=False))
        except ApiException as exc:
            if exc.status != 404:
                raise
            return None

    def apply(self, doc: Mapping[str, Any], namespace: str, dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply one object as Helm's field manager, forcing conflicts (creates it if
        missing). With ``dry_run`` nothing is stored: the result is what the API server would make
        of it (defaults, normalised quantities and ports, merged keyed lists)."""
        res = self.resource(str(doc["apiVersion"]), str(doc["kind"]))
        body = dict(doc)
        meta = dict(body.get("metadata") or {})
        if res.namespaced:
            meta.setdefault("namespace", namespace)
        body["metadata"] = meta
        kwargs: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        result = self.dyn.server_side_apply(
            res,
            body=body,
            name=meta["name"],
            namespace=meta.get("namespace"),
            field_manager=HELM_FIELD_MANAGER,
            force_conflicts=True,
            serialize=False,
            **kwargs,
        )
        return _body(result)

    def patch_dry_run(
        self, doc: Mapping[str, Any], patch: Mapping[str, Any], namespace: str, strategic: bool
    ) -> dict[str, Any]:
        """What patching ``doc``'s live object with ``patch`` (a strategic merge patch, or a JSON
        merge patch) would make of it; nothing is stored. A kind without strategic merge (custom
        resources) answers 415."""
        res = self.resource(str(doc["apiVersion"]), str(doc["kind"]))
        meta = doc.get("metadata") or {}
        ns = (meta.get("namespace") or namespace) if res.namespaced else None
        content_type = f"application/{'strategic-merge-patch' if strategic else 'merge-patch'}+json"
        result = res.patch(
            body=dict(patch),
            name=meta["name"],
            namespace=ns,
            content_type=content_type,
            dry_run="All",
            serialize=False,
        )
        return _body(result)

    def get_custom(self, ref: ObjectRef, plural: str) -> dict[str, Any] | None:
        group, _, version = ref.api_version.rpartition("/")
        api = client.CustomObjectsApi(self.api)
        try:
            if ref.namespace:
                obj: Any = api.get_namespaced_custom_object(group, version, ref.namespace, plural, ref.name)
            else:
                obj = api.get_cluster_custom_object(group, version, plural, ref.name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(obj)

    def patch_status(
        self, ref: ObjectRef, plural: str, status: Mapping[str, Any], resource_version: str | None = None
    ) -> None:
        """Merge ``status`` into the status subresource; with ``resource_version``, only if the
        resource is still at that version (the API server answers 409 Conflict otherwise)."""
        group, _, version = ref.api_version.rpartition("/")
        api = client.CustomObjectsApi(self.api)
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        if ref.namespace:
            api.patch_namespaced_custom_object_status(group, version, ref.namespace, plural, ref.name, body)
        else:
            api.patch_cluster_custom_object_status(group, version, plural, ref.name, body)

    def event(self, ref: ObjectRef, etype: str, reason: str, message: str) -> None:
        now = dt.datetime.now(dt.UTC)
        ns = ref.namespace or "default"
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=f"{ref.name}.{secrets.token_hex(8)}", namespace=ns),
            involved_object=client.V1ObjectReference(
                api_version=ref.api_version,
                kind=ref.kind,
                name=ref.name,
                namespace=ref.namespace,
                uid=ref.uid,
            ),
            type=etype,
            reason=reason,
            message=message[:1024],
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            source=client.V1EventSource(component="helm-operator"),
        )
        try:
            # Nothing is read back: deserialising the answer into the client's models cost more
            # than the request (the answer is drained so that its connection can be used again).
            resp: Any = self.core.create_namespaced_event(ns, body, _preload_content=False)
            resp.read()
            resp.release_conn()
        except ApiException as exc:  # e.g. a terminating namespace: an Event is not worth failing for
            log.warning("could not post event %s on %s/%s: %s", reason, ns, ref.name, exc.reason)

    def terminating_namespaces(self) -> list[str]:
        items: Any = self.core.list_namespace().items
        return [str(n.metadata.name) for n in items if n.metadata.deletion_timestamp]

    def list_custom(
        self, api_version: str, plural: str, namespace: str | None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """Every custom resource of a kind (that ``label_selector`` selects), in one namespace or
        (None) in all."""
        group, _, version = api_version.rpartition("/")
        api = client.CustomObjectsApi(self.api)
        selected: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        if namespace:
            listing: Any = api.list_namespaced_custom_object(group, version, namespace, plural, **selected)
        else:
            listing = api.list_cluster_custom_object(group, version, plural, **selected)
        items: list[dict[str, Any]] = listing["items"]
        return items

    def deleting_custom(
        self, api_version: str, plural: str, namespace: str, finalizer: str, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """Custom resources in a namespace (that ``label_selector`` selects) that wait for
        ``finalizer`` to let them go."""
        group, _, version = api_version.rpartition("/")
        selected: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        listing: Any = client.CustomObjectsApi(self.api).list_namespaced_custom_object(
            group, version, namespace, plural, **selected
        )
        items: list[dict[str, Any]] = listing["items"]
        return [
            i
            for i in items
            if i["metadata"].get("deletionTimestamp") and finalizer in (i["metadata"].get("finalizers") or [])
        ]

    def patch_custom(self, ref: ObjectRef, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        """A merge patch of a custom resource (its metadata or spec; the status has its own)."""
        group, _, version = ref.api_version.rpartition("/")
        api = client.CustomObjectsApi(self.api)
        if ref.namespace:
            obj: Any = api.patch_namespaced_custom_object(
                group, version, ref.namespace, plural, ref.name, body
            )
        else:
            obj = api.patch_cluster_custom_object(group, version, plural, ref.name, body)
        return dict(obj)

    def create_cluster_custom(self, api_version: str, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        group, _, version = api_version.rpartition("/")
        obj: Any = client.CustomObjectsApi(self.api).create_cluster_custom_object(
            group, version, plural, body
        )
        return dict(obj)

    def remove_labels(self, ref: ObjectRef, plural: str, keys: Sequence[str]) -> None:
        """Remove labels from a custom resource (a merge patch: absent ones are no error)."""
        group, _, version = ref.api_version.rpartition("/")
        body = {"metadata": {"labels": dict.fromkeys(keys)}}
        api = client.CustomObjectsApi(self.api)
        if ref.namespace:
            api.patch_namespaced_custom_object(group, version, ref.namespace, plural, ref.name, body)
        else:
            api.patch_cluster_custom_object(group, version, plural, ref.name, body)

    def drop_finalizer(self, ref: ObjectRef, plural: str, finalizers: Sequence[str], finalizer: str) -> None:
        group, _, version = ref.api_version.rpartition("/")
        body = {"metadata": {"finalizers": [f for f in finalizers if f != finalizer]}}
        api = client.CustomObjectsApi(self.api)
        try:
            if ref.namespace:
                api.patch_namespaced_custom_object(group, version, ref.namespace, plural, ref.name, body)
            else:
                api.patch_cluster_custom_object(group, version, plural, ref.name, body)
        except ApiException as exc:
            if exc.status != 404:  # gone already: nothing left to let go
                raise

    def delete_labelled(
        self,
        group: str,
        version: str,
        plural: str,
        namespaced: bool,
        selector: str,
        skip_namespace: str | None,
    ) -> list[str]:
        """Delete every object of a kind that carries ``selector`` (in all namespaces but
        ``skip_namespace`` for a namespaced kind), except those Helm is told to keep
        (``helm.sh/resource-policy: keep``). Returns what was deleted, as ``namespace/name``."""
        base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        listing = request_json(self.api, "GET", f"{base}/{plural}", [("labelSelector", selector)])
        deleted = []
        for item in listing.get("items") or []:
            meta = item.get("metadata") or {}
            ns = meta.get("namespace")
            if namespaced and ns == skip_namespace:
                continue
            if (meta.get("annotations") or {}).get("helm.sh/resource-policy") == "keep":
                continue
            where = f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"
            try:
                request_json(
                    self.api, "DELETE", f"{where}/{meta['name']}", [("propagationPolicy", "Background")]
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
            deleted.append(f"{ns}/{meta['name']}" if ns else str(meta["name"]))
        return deleted
