"""``helm-operator plan show|approve``: review and approve the plan of a change that waits for
approval (``approval: manual``). Reads the plan the operator recorded in ``status.plan``; approving
writes its id into ``helm-operator.io/approve``, the same as ``kubectl annotate`` would."""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from helm_operator.cli.common import UserError, api_client, reporting
from helm_operator.core.naming import APPROVE_ANNOTATION


def _resource(dyn: Any, text: str) -> Any:
    """The API resource named as kubectl names one: a plural, a singular, a short name or a kind,
    optionally followed by ``.group``."""
    from kubernetes.dynamic.resource import ResourceList

    word, _, group = text.lower().partition(".")
    found = []
    for r in dyn.resources.search():
        name, kind = getattr(r, "name", None) or "", getattr(r, "kind", None) or ""
        if isinstance(r, ResourceList) or not name or "/" in name or (group and r.group != group):
            continue  # a list or a subresource, or another group
        singular = (getattr(r, "singular_name", None) or "").lower()
        if word in {name, singular, kind.lower(), *(r.short_names or [])}:
            found.append(r)
    if not found:
        raise UserError(f"the API server serves no resource named {text!r}")
    if len({(r.group, r.kind) for r in found}) > 1:
        names = ", ".join(sorted({f"{r.name}.{r.group}" for r in found}))
        raise UserError(f"{text!r} is ambiguous: {names}; name it as plural.group")
    return max(found, key=lambda r: bool(getattr(r, "preferred", False)))


def _read(args: argparse.Namespace, scratch: Path) -> tuple[Any, Any, dict[str, Any]]:
    """The resource the arguments name, as the API server serves it now. Its kind is resolved on
    discovery read for this command (cached in ``scratch``): the client's default cache is one
    file per server address for the whole machine, shared with any other cluster that had that
    address and not read again when a name is missing (a CRD created since)."""
    from kubernetes import dynamic
    from kubernetes.client.exceptions import ApiException

    dyn = dynamic.DynamicClient(api_client(args.kubeconfig), cache_file=str(scratch / "discovery.json"))
    res = _resource(dyn, args.resource)
    ns = args.namespace if res.namespaced else None
    try:
        obj = res.get(name=args.name, namespace=ns).to_dict()
    except ApiException as exc:
        if exc.status == 404:
            raise UserError(f"{res.kind} {args.name} not found{f' in {ns}' if ns else ''}") from None
        raise
    return res, ns, obj


def _plan(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    plan = (obj.get("status") or {}).get("plan")
    if not plan:
        kind, name = obj.get("kind"), (obj.get("metadata") or {}).get("name")
        raise UserError(
            f"{kind} {name} has no plan: its watch or annotation does not ask for approval, "
            "or no change waits"
        )
    return dict(plan)


def _waiting(obj: Mapping[str, Any]) -> bool:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "ApprovalPending":
            return bool(c.get("status") == "True")
    return False


def show(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="helm-operator-plan-") as scratch:
        _, _, obj = _read(args, Path(scratch))
    plan = _plan(obj)
    if args.output == "json":
        print(json.dumps(plan, indent=2, sort_keys=True))
        return 0
    print(plan.get("summary"))
    for line in plan.get("objects") or []:
        print(f"  {line}")
    listed, total = (
        len(plan.get("objects") or []),
        sum(int(plan.get(k) or 0) for k in ("created", "changed", "deleted")),
    )
    if total > listed:
        print(f"  … and {total - listed} more")
    for note in plan.get("notes") or []:
        print(f"note: {note}")
    if plan.get("approvedAt"):
        print(f"approved and applied at {plan['approvedAt']}")
    elif _waiting(obj):
        ns = (obj.get("metadata") or {}).get("namespace")
        where = f" -n {ns}" if ns else ""
        print(
            f"waiting for approval: helm-operator plan approve {args.resource} {args.name}{where} "
            f"--id {plan['id']}"
        )
    return 0


def approve(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="helm-operator-plan-") as scratch:
        return _approve(args, *_read(args, Path(scratch)))


def _approve(args: argparse.Namespace, res: Any, ns: str | None, obj: Mapping[str, Any]) -> int:
    plan = _plan(obj)
    if args.id and args.id != plan.get("id"):
        raise UserError(
            f"plan {args.id} is not the plan that waits ({plan.get('summary')}); "
            "the resource or its chart changed since: review the new plan"
        )
    if plan.get("approvedAt"):
        raise UserError(f"plan {plan.get('id')} was already approved and applied at {plan['approvedAt']}")
    patch = {"metadata": {"annotations": {APPROVE_ANNOTATION: plan["id"]}}}
    res.patch(body=patch, name=args.name, namespace=ns, content_type="application/merge-patch+json")
    print(f"approved {plan.get('summary')}")
    return 0


def register(sub: Any) -> None:
    plan = sub.add_parser("plan", help="show or approve the plan of a change that waits for approval")
    plan_sub = plan.add_subparsers(dest="plan_command", required=True)
    for name, func, help_ in (
        ("show", show, "what the change would do: the action, the revision, the objects"),
        ("approve", approve, "approve the plan that waits (it is applied at once, or in the next window)"),
    ):
        p = plan_sub.add_parser(name, help=help_)
        p.add_argument("resource", help="the kind, plural or plural.group of the resource")
        p.add_argument("name", help="the resource's name")
        p.add_argument("-n", "--namespace", default="default", help="the resource's namespace")
        p.add_argument("--kubeconfig", default=None, help="default $KUBECONFIG, else in-cluster")
        if name == "show":
            p.add_argument("-o", "--output", choices=("text", "json"), default="text")
        else:
            p.add_argument("--id", default=None, help="approve only if the waiting plan has this id")
        p.set_defaults(func=reporting(func))
