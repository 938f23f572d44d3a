"""``helm-operator migrate-storage KIND``: rewrite every stored object of a kind in the CRD's
storage version, then trim ``status.storedVersions`` to it, so an old version can be removed.

Each object is read and written back unchanged (an update the API server stores in the storage
version, converting through the webhook); an object changed meanwhile is read again, one deleted
meanwhile is skipped. Safe to run twice and to interrupt: the trim happens only after every
object was written, and a second run writes them again.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from helm_operator.cli.common import UserError, api_client, reporting

PAGE = 200


def _clients(args: argparse.Namespace) -> tuple[Any, Any]:
    from kubernetes import client

    api = api_client(args.kubeconfig)
    return client.ApiextensionsV1Api(api), client.CustomObjectsApi(api)


def _crd(apiext: Any, name: str) -> Any:
    from kubernetes.client.exceptions import ApiException

    try:
        return apiext.read_custom_resource_definition(name)
    except ApiException as exc:
        if exc.status == 404:
            raise UserError(f"no CustomResourceDefinition {name!r} (name it as <plural>.<group>)") from None
        raise


def _rewrite(custom: Any, group: str, version: str, plural: str, item: dict[str, Any]) -> bool:
    """Write one object back as it is; False: it is gone."""
    from kubernetes.client.exceptions import ApiException

    meta = item["metadata"]
    ns, name = meta.get("namespace"), meta["name"]
    for _ in range(5):
        try:
            if ns:
                custom.replace_namespaced_custom_object(group, version, ns, plural, name, item)
            else:
                custom.replace_cluster_custom_object(group, version, plural, name, item)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            if exc.status != 409:
                raise UserError(
                    f"{ns + '/' if ns else ''}{name}: {exc.status} {exc.reason}: {exc.body}"
                ) from None
            item = (
                custom.get_namespaced_custom_object(group, version, ns, plural, name)
                if ns
                else custom.get_cluster_custom_object(group, version, plural, name)
            )
    raise UserError(f"{ns + '/' if ns else ''}{name}: changed on every attempt; run again")


def migrate(args: argparse.Namespace) -> int:
    apiext, custom = _clients(args)
    crd = _crd(apiext, args.crd)
    storage = next(v.name for v in crd.spec.versions if v.storage)
    stored = list(crd.status.stored_versions or [])
    group, plural = crd.spec.group, crd.spec.names.plural
    print(f"{args.crd}: storage version {storage}; stored versions {', '.join(stored) or 'none'}")
    done, gone, token, started = 0, 0, None, time.monotonic()
    while True:
        page = custom.list_cluster_custom_object(group, storage, plural, limit=PAGE, _continue=token)
        for item in page["items"]:
            if _rewrite(custom, group, storage, plural, item):
                done += 1
            else:
                gone += 1
        token = (page.get("metadata") or {}).get("continue")
        print(f"  rewritten {done}" + (f", {gone} gone meanwhile" if gone else ""), flush=True)
        if not token:
            break
    if stored != [storage]:
        body = {"status": {"storedVersions": [storage]}}
        apiext.patch_custom_resource_definition_status(args.crd, body)
    took = time.monotonic() - started
    print(f"{args.crd}: {done} objects stored as {storage} in {took:.1f}s; storedVersions: [{storage}]")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "migrate-storage",
        help="store every object of a kind in its CRD's storage version, then trim status.storedVersions",
    )
    p.add_argument("crd", help="the CRD: <plural>.<group>")
    p.add_argument("--kubeconfig", default=None, help="default $KUBECONFIG, else in-cluster")
    p.set_defaults(func=reporting(migrate))
