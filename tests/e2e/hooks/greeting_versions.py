"""Converters between the two versions of the Greeting kind: v1 says ``spec.message``; v2 (the
chart's 2.x values) says ``spec.greeting: {text, emphasis}``. What v1 cannot hold (``emphasis``)
travels in an annotation, so a round trip through v1 loses nothing."""

from __future__ import annotations

import json
from typing import Any

from helm_operator.hooks import Hooks

hooks = Hooks()
KEPT = "conv.test.helm-operator.io/v2-greeting"


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    meta = obj.setdefault("metadata", {})
    found: dict[str, str] = meta.get("annotations") or {}
    return found


def _set_annotations(obj: dict[str, Any], annotations: dict[str, str]) -> None:
    if annotations:
        obj["metadata"]["annotations"] = annotations
    else:
        obj["metadata"].pop("annotations", None)


@hooks.convert("v1", "v2")
def up(obj: dict[str, Any]) -> dict[str, Any]:
    spec = dict(obj.get("spec") or {})
    annotations = dict(_annotations(obj))
    kept = json.loads(annotations.pop(KEPT, "{}"))
    obj["spec"] = {
        **{k: v for k, v in spec.items() if k != "message"},
        "greeting": {"text": spec.get("message", ""), **kept},
    }
    _set_annotations(obj, annotations)
    return obj


@hooks.convert("v2", "v1")
def down(obj: dict[str, Any]) -> dict[str, Any]:
    spec = dict(obj.get("spec") or {})
    greeting = dict(spec.get("greeting") or {})
    text = greeting.pop("text", "")
    if text == "boom":
        raise ValueError("greeting.text 'boom' has no v1 form")
    annotations = dict(_annotations(obj))
    if greeting:
        annotations[KEPT] = json.dumps(greeting, sort_keys=True)
    else:
        annotations.pop(KEPT, None)
    obj["spec"] = {**{k: v for k, v in spec.items() if k != "greeting"}, "message": text}
    _set_annotations(obj, annotations)
    return obj
