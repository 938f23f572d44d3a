"""Chart versions served side by side: semantic versions, and which one a resource's pin selects.

A pin is a semantic-version range as Helm writes one (``1.2.3``, ``~1.2``, ``^1``, ``1.2.x``,
``>=1.2.0 <1.4.0``, ``>=1.2, <1.4``, ``… || …``); the highest served version it matches wins.
"""

from __future__ import annotations

from collections.abc import Sequence

import semantic_version as semver


def problem(version: str) -> str | None:
    """What is wrong with ``version`` as a chart version (None: nothing)."""
    try:
        semver.Version.coerce(version.lstrip("v"))
    except ValueError:
        return f"{version!r} is not a semantic version such as 1.2.0"
    return None


def key(version: str) -> semver.Version:
    return semver.Version.coerce(version.lstrip("v"))


class PinError(ValueError):
    """A pin that cannot be read, or that matches no served version."""


def _spec(pin: str) -> semver.NpmSpec:
    text = " ".join(part.strip() for part in pin.replace(",", " ").split())
    try:
        return semver.NpmSpec(text)
    except ValueError:
        raise PinError(
            f"{pin!r} is not a version or a version range (e.g. 1.2.3, ~1.2, ^1, >=1.2 <1.4)"
        ) from None


def select(served: Sequence[str], pin: str | None) -> str:
    """The version that serves a resource: the newest, or the newest its pin matches."""
    ordered = sorted(served, key=key)
    if not ordered:
        raise PinError("no chart version is served")
    if pin is None or not pin.strip():
        return ordered[-1]
    spec = _spec(pin.strip())
    matching = [v for v in ordered if spec.match(key(v))]
    if not matching:
        raise PinError(f"{pin!r} matches none of the served chart versions ({', '.join(ordered)})")
    return matching[-1]


def newer(running: str | None, served: Sequence[str]) -> str | None:
    """The newest served version if it is newer than ``running`` (None: none is)."""
    if not served or running is None or problem(running):
        return None
    top = max(served, key=key)
    return top if key(top) > key(running) else None
