"""YAML of rendered manifests, read and written by libyaml with each plain scalar's tag remembered.

libyaml parses and emits in C but asks the Python resolver for the tag of every plain scalar
(``replicas: 1`` is an int, ``name: web`` a string), trying its regular expressions one by one:
most of the time a rendered manifest takes to compose. A chart renders the same short scalars
release after release, so the answer for (value, implicit) is remembered: the same tags as the
resolver's, several times faster for every release's post-render and drift parse.
"""

from __future__ import annotations

from typing import Any

import yaml

_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it
_BASE_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_LONGEST = 64  # longer scalars (scripts, certificates) are rarely repeated: not remembered
_MOST = 4096  # remembered answers; all forgotten at once past this (charts repeat a few hundred)
_TAGS: dict[tuple[str, tuple[bool, bool]], str] = {}


def _resolve(resolver: Any, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool], base: Any) -> str:
    remembered = kind is yaml.ScalarNode and implicit[0] and len(value) <= _LONGEST
    if not remembered or resolver.yaml_path_resolvers:
        return str(base.resolve(resolver, kind, value, implicit))
    key = (value, implicit)
    tag = _TAGS.get(key)
    if tag is None:
        if len(_TAGS) >= _MOST:
            _TAGS.clear()
        tag = _TAGS[key] = str(base.resolve(resolver, kind, value, implicit))
    return tag


class Loader(_BASE_LOADER):  # type: ignore[misc]
    """Safe loading (no Python objects), tags as ``yaml.SafeLoader`` resolves them."""

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        return _resolve(self, kind, value, implicit, _BASE_LOADER)


class Dumper(_BASE_DUMPER):  # type: ignore[misc]
    """Safe dumping; the emitter's question "would this scalar read back as a string?" remembered."""

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        return _resolve(self, kind, value, implicit, _BASE_DUMPER)
