"""What applying resources would change, written up: a unified YAML diff per object (``--- live/
<kind>/<ns>/<name>``, ``+++ desired/…``) and a one-line summary, or JSON. Pure.

Nothing secret is printed: every value in a Secret's ``data``/``stringData`` is replaced by a
marker that only says whether it changes, and strings of the values that look secret (keys such
as ``password``) are masked wherever they appear.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from helm_operator.core.masking import mask
from helm_operator.core.naming import KOPF_PREFIX
from helm_operator.drift.diff import comparable
from helm_operator.preview.kubectl import LAST_APPLIED
from helm_operator.preview.plan import ObjectChange, ResourcePreview
from helm_operator.release.state import Action

SECRET_MASK = "******"
SECRET_CHANGED = "****** (changed)"

# How the report words each Helm action.
ACTION_WORDS: dict[str, str] = {
    Action.INSTALL.value: "would be installed",
    Action.UPGRADE.value: "would be upgraded",
    Action.REINSTALL.value: "would be uninstalled and installed again",
    Action.ROLLBACK.value: "would be rolled back to its last deployed revision",
    Action.NOTHING.value: "no Helm action",
}


def shown(obj: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """An object as the report shows it: no status, no per-write metadata, no kubectl copy, no
    bookkeeping of the operator's (kopf's last handled digest on a resource it serves)."""
    if obj is None:
        return None
    out = comparable(obj)
    annotations = {
        k: v
        for k, v in (out["metadata"].get("annotations") or {}).items()
        if k != LAST_APPLIED and not k.startswith(f"{KOPF_PREFIX}/")
    }
    if annotations:
        out["metadata"]["annotations"] = annotations
    else:
        out["metadata"].pop("annotations", None)
    return out


def _is_secret(obj: Mapping[str, Any] | None) -> bool:
    return obj is not None and obj.get("kind") == "Secret" and obj.get("apiVersion") == "v1"


def masked(
    before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Both sides as shown, a Secret's values replaced by markers: the same marker on both sides
    when a value stays, ``SECRET_CHANGED`` on the desired side when it changes."""
    b, a = shown(before), shown(after)
    if not (_is_secret(b) or _is_secret(a)):
        return b, a
    for section in ("data", "stringData"):
        old = (b or {}).get(section) or {}
        new = (a or {}).get(section) or {}
        if b is not None and section in b:
            b[section] = dict.fromkeys(old, SECRET_MASK)
        if a is not None and section in a:
            a[section] = {
                k: SECRET_MASK if k in old and old[k] == v else SECRET_CHANGED for k, v in new.items()
            }
    return b, a


def _yaml(obj: Mapping[str, Any] | None) -> list[str]:
    if obj is None:
        return []
    text = yaml.safe_dump(json.loads(json.dumps(obj, default=str)), sort_keys=True, default_flow_style=False)
    return text.splitlines()


def unified(ref: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str:
    """A unified diff of two objects' YAML, ``live/<ref>`` against ``desired/<ref>``."""
    lines = difflib.unified_diff(_yaml(before), _yaml(after), f"live/{ref}", f"desired/{ref}", lineterm="")
    return "\n".join(lines)


def change_diff(change: ObjectChange) -> str:
    return unified(change.ref, *masked(change.before, change.after))


def _resource_line(p: ResourcePreview) -> str:
    state = {"new": "new resource", "changed": "changed", "unchanged": "unchanged"}[p.state]
    words = ACTION_WORDS.get(p.action, p.action)
    release = (
        f"no Helm action for release {p.release}" if p.action == "nothing" else f"release {p.release} {words}"
    )
    return f"# {p.ref}: {state}; {release} ({p.reason})"


_VERB = {"create": "would be created", "update": "would be changed", "delete": "would be deleted"}


def _section(p: ResourcePreview) -> list[str]:
    out = [_resource_line(p)]
    if p.state != "unchanged":
        out.append(unified(p.ref, p.before, p.after))
    for c in p.changes:
        detail = f": {', '.join(c.paths)}" if c.paths else ""
        out.append(f"# {c.ref} {_VERB[c.action]}{detail}")
        out.append(change_diff(c))
    for c in p.uncorrected:
        what = "is missing" if c.action == "create" else f"differs at {', '.join(c.paths)}"
        out.append(f"# note: {c.ref} {what}; it would stay so (drift is not corrected for this resource)")
    out += [f"# note: {n}" for n in p.notes]
    return [mask(line, list(p.secrets)) for line in out]


def counts(previews: Sequence[ResourcePreview]) -> dict[str, dict[str, int]]:
    """How many objects each change and how many releases each Helm action concerns."""
    objects = Counter(c.action for p in previews for c in p.changes)
    actions = Counter(p.action for p in previews if p.action != Action.NOTHING.value)
    return {
        "objects": {k: objects.get(k, 0) for k in ("create", "update", "delete")},
        "releases": dict(sorted(actions.items())),
    }


def summary(previews: Sequence[ResourcePreview]) -> str:
    """One line: what the apply would change, or that it would change nothing."""
    if not any(p.changed for p in previews):
        return f"Summary: no changes ({len(previews)} resource{'s' if len(previews) != 1 else ''} up to date)"
    c = counts(previews)
    o = c["objects"]
    states = Counter(p.state for p in previews if p.state != "unchanged")
    parts = [
        "resources: " + (", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "unchanged"),
        f"objects: {o['create']} to create, {o['update']} to change, {o['delete']} to delete",
    ]
    if c["releases"]:
        parts.append("releases: " + ", ".join(f"{n} to {a}" for a, n in c["releases"].items()))
    return "Summary: " + "; ".join(parts)


def report_text(previews: Sequence[ResourcePreview]) -> str:
    lines = [line for p in previews for line in _section(p)]
    return "\n".join([*lines, summary(previews)]) + "\n"


def _change_json(c: ObjectChange, secrets: Sequence[Any]) -> dict[str, Any]:
    return {
        "action": c.action,
        "apiVersion": c.api_version,
        "kind": c.kind,
        "namespace": c.namespace,
        "name": c.name,
        "paths": list(c.paths),
        "diff": mask(change_diff(c), list(secrets)),
    }


def report_json(previews: Sequence[ResourcePreview]) -> str:
    """The same report for machines: one entry per resource, diffs as text (masked)."""
    resources = []
    for p in previews:
        ns, name = p.release.split("/", 1)
        resources.append(
            {
                "apiVersion": p.api_version,
                "kind": p.kind,
                "namespace": p.namespace,
                "name": p.name,
                "state": p.state,
                "diff": mask(unified(p.ref, p.before, p.after), list(p.secrets))
                if p.state != "unchanged"
                else "",
                "release": {"namespace": ns, "name": name, "action": p.action, "reason": p.reason},
                "changes": [_change_json(c, p.secrets) for c in p.changes],
                "uncorrected": [_change_json(c, p.secrets) for c in p.uncorrected],
                "notes": [mask(n, list(p.secrets)) for n in p.notes],
            }
        )
    doc = {"changed": any(p.changed for p in previews), "summary": counts(previews), "resources": resources}
    return json.dumps(doc, indent=2) + "\n"
