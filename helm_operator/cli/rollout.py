"""``helm-operator rollout status|pause|resume|abort|crd``: follow and steer the staged rollouts of
the watches that have a ``rollout:`` policy. Each rollout is a ``Rollout`` object (cluster-scoped,
named ``<plural>.<group>`` of its kind); these commands read its status and write its spec, as
``kubectl`` could."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from helm_operator.cli.common import UserError, api_client, reporting
from helm_operator.core.naming import ROLLOUT_GROUP, ROLLOUT_PLURAL, ROLLOUT_VERSION

# Seconds pause/resume/abort wait for the operator to take them (it looks every 15 s).
WAIT_FOR_OPERATOR = 30.0
POLL_EVERY = 0.5
MEMBERS_SHOWN = 10  # a wave's members named by ``rollout status`` (``-o json``: all its record lists)


def _api(args: argparse.Namespace) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(api_client(args.kubeconfig))


def _get(api: Any, name: str) -> dict[str, Any]:
    from kubernetes.client.exceptions import ApiException

    try:
        obj: dict[str, Any] = api.get_cluster_custom_object(
            ROLLOUT_GROUP, ROLLOUT_VERSION, ROLLOUT_PLURAL, name
        )
    except ApiException as exc:
        if exc.status == 404:
            names = [i["metadata"]["name"] for i in _list(api)]
            known = (
                f"; there are: {', '.join(names)}"
                if names
                else "; there is none (no watch has a rollout policy)"
            )
            raise UserError(f"no rollout {name!r}{known}") from None
        raise
    return obj


def _list(api: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.list_cluster_custom_object(
        ROLLOUT_GROUP, ROLLOUT_VERSION, ROLLOUT_PLURAL
    )["items"]
    return items


def describe(obj: Mapping[str, Any]) -> list[str]:
    """A rollout as lines of text: its phase, each wave's progress and members, what failed."""
    st = obj.get("status") or {}
    spec = obj.get("spec") or {}
    lines = [
        f"{obj['metadata']['name']}: rollout {st.get('rollout', '?')} {st.get('phase', 'not started')}"
        f" at wave {st.get('wave', '?')} ({st.get('updated', '?')} updated)"
        + (" (paused)" if spec.get("paused") and st.get("phase") != "Paused" else ""),
    ]
    if st.get("message"):
        lines.append(f"  {st['message']}")
    for w in st.get("waves") or []:
        when = ", ".join(f"{k[:-2]} {w[k]}" for k in ("admittedAt", "readyAt", "completedAt") if w.get(k))
        lines.append(
            f"  wave {w['name']}: {w.get('updated', 0)}/{w.get('resources', 0)} updated, "
            f"{w.get('failed', 0)} failed" + (f" ({when})" if when else "")
        )
        if w.get("members"):
            listed, total = w["members"][:MEMBERS_SHOWN], int(w.get("resources") or 0)
            more = f" and {total - len(listed)} more" if total > len(listed) else ""
            lines.append(f"    members: {', '.join(listed)}{more}")
    for f in st.get("failures") or []:
        lines.append(f"  failed: {f['resource']}: {f['message']}")
    return lines


def status(args: argparse.Namespace) -> int:
    api = _api(args)
    objs = [_get(api, args.name)] if args.name else _list(api)
    if args.output == "json":
        print(json.dumps([o.get("status") or {} for o in objs], indent=2, sort_keys=True))
        return 0
    if not objs:
        print("no rollouts: no watch has a rollout policy, or its operator has not started")
    for o in objs:
        print("\n".join(describe(o)))
    return 0


def _ended(obj: Mapping[str, Any]) -> str | None:
    """The phase of a rollout that is over (Complete, Aborted), None while it is not."""
    phase = (obj.get("status") or {}).get("phase")
    return str(phase) if phase in ("Complete", "Aborted") else None


def _steer(
    args: argparse.Namespace,
    change: Any,
    said: str,
    taken: Callable[[Mapping[str, Any], Mapping[str, Any]], bool],
    verb: str,
) -> int:
    """Write the change into the Rollout's spec; for a rollout that is not over, then wait
    (``--wait`` seconds) until its status shows the operator took it (``taken(status, patch)``):
    a command that returned before the operator acted left a change made in that gap waiting for
    the rollout it meant to end. A change for the next rollout (a pause set while none moves)
    has nothing to wait for."""
    api = _api(args)
    obj = _get(api, args.name)
    patch = change(obj)
    api.patch_cluster_custom_object(
        ROLLOUT_GROUP, ROLLOUT_VERSION, ROLLOUT_PLURAL, args.name, {"spec": patch}
    )
    if _ended(obj) or args.wait <= 0:
        print(f"{args.name}: {said}")
        return 0
    started = time.monotonic()
    while not taken(_get(api, args.name).get("status") or {}, patch):
        if time.monotonic() - started >= args.wait:
            print(
                f"{args.name}: asked to {verb}, but the operator has not taken it within "
                f"{args.wait:g}s: is it running? It takes it when it does",
                file=sys.stderr,
            )
            return 1
        time.sleep(POLL_EVERY)
    print(f"{args.name}: {said}")
    return 0


def _over(obj: Mapping[str, Any]) -> str:
    st = obj.get("status") or {}
    return f"rollout {st.get('rollout', '?')} is {_ended(obj)}"


def pause(args: argparse.Namespace) -> int:
    obj = _get(_api(args), args.name)
    phase = (obj.get("status") or {}).get("phase")
    said = "paused: no further wave starts (resume to go on)"
    if phase == "Halted":
        said += "; it is Halted: no wave starts before a resume anyway"
    elif _ended(obj):
        said = f"paused: {_over(obj)}; the next rollout starts paused (resume to go on)"
    return _steer(
        args, lambda o: {"paused": True}, said, lambda st, _: st.get("phase") in ("Paused", "Halted"), "pause"
    )


def resume(args: argparse.Namespace) -> int:
    def change(obj: Mapping[str, Any]) -> dict[str, Any]:
        st, spec = obj.get("status") or {}, obj.get("spec") or {}
        patch: dict[str, Any] = {"paused": False}
        if st.get("phase") == "Halted":  # one more retry than the rollout has seen
            patch["retries"] = max(int(spec.get("retries") or 0), int(st.get("retries") or 0)) + 1
        return patch

    def taken(st: Mapping[str, Any], patch: Mapping[str, Any]) -> bool:
        if "retries" in patch:  # the halted wave retried (or the rollout moved on since)
            return int(st.get("retries") or 0) >= patch["retries"] or st.get("phase") != "Halted"
        return st.get("phase") != "Paused"

    obj = _get(_api(args), args.name)
    phase = (obj.get("status") or {}).get("phase")
    if _ended(obj):
        if not (obj.get("spec") or {}).get("paused"):
            raise UserError(f"{args.name}: {_over(obj)}: nothing to resume")
        said = f"resumed: {_over(obj)}; the next rollout starts moving"
    elif phase == "Halted":
        said = "resumed: the halted wave is tried again"
    else:
        said = "resumed: the next wave starts when due"
    return _steer(args, change, said, taken, "resume")


def abort(args: argparse.Namespace) -> int:
    def change(obj: Mapping[str, Any]) -> dict[str, Any]:
        current = (obj.get("status") or {}).get("rollout")
        if not current:
            raise UserError(f"{args.name} has no rollout to abort yet")
        if _ended(obj):
            raise UserError(f"{args.name}: {_over(obj)}: nothing to abort")
        return {"abort": current, "paused": False}  # a pause was of this rollout: the next starts moving

    def taken(st: Mapping[str, Any], patch: Mapping[str, Any]) -> bool:
        return st.get("rollout") != patch["abort"] or st.get("phase") == "Aborted"

    said = "aborted: resources that did not move keep what they run until a change of their own"
    return _steer(args, change, said, taken, "abort")


def crd(args: argparse.Namespace) -> int:
    from helm_operator.scaffold.deploy import dump
    from helm_operator.scaffold.rollout_crd import rollout_crd

    print(dump(rollout_crd()), end="")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "rollout", help="follow and steer the staged rollouts of watches with a rollout policy"
    )
    rs = p.add_subparsers(dest="rollout_command", required=True)
    for name, func, help_ in (
        ("status", status, "each rollout's phase and waves (all, or the one named)"),
        ("pause", pause, "start no further wave"),
        ("resume", resume, "go on after a pause; retry a halted wave"),
        ("abort", abort, "start no further wave of this rollout"),
        ("crd", crd, "print the Rollout CRD (kubectl apply -f -)"),
    ):
        c = rs.add_parser(name, help=help_)
        if name != "crd":
            c.add_argument(
                "name",
                nargs="?" if name == "status" else None,
                help="the Rollout: <plural>.<group> of the kind",
            )
            c.add_argument("--kubeconfig", default=None, help="default $KUBECONFIG, else in-cluster")
        if name == "status":
            c.add_argument("-o", "--output", choices=("text", "json"), default="text")
        elif name != "crd":
            c.add_argument(
                "--wait",
                type=float,
                default=WAIT_FOR_OPERATOR,
                metavar="SECONDS",
                help="wait until the operator took it, at most this long (0: do not wait); exit 1 "
                "if it has not taken it by then",
            )
        c.set_defaults(func=reporting(func))
