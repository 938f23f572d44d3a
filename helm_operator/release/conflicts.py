"""Field conflicts of Helm 4's server-side apply: an upgrade or rollback that would change a field
another field manager owns (a ``kubectl edit``, a controller) fails without ``--force-conflicts``.

Forcing every such field would also take fields from trusted managers (an autoscaler's replicas),
which drift correction leaves alone. So a conflict is settled by the drift rules instead: fields
of untrusted managers are taken back as a drift correction takes them (then the action goes on),
and a conflict with a trusted manager, or under a drift mode that leaves hand edits alone, is a
stall that names who owns what (``refusal``). Pure: parsing of what the API server said, and the
decision.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

RETRY_HINT = "then annotate the resource helm-operator.io/retry=<a new value>"


@dataclass(frozen=True)
class FieldConflict:
    """Fields of one object that one other field manager owns."""

    obj: str  # "ConfigMap ns/name" ("" when the message did not name it)
    manager: str
    fields: tuple[str, ...]

    def summary(self) -> str:
        where = f"{self.obj} " if self.obj else ""
        return f"{where}{', '.join(self.fields)} ({self.manager})"


# Helm 4: `conflict occurred while applying object ns/name /v1, Kind=ConfigMap: Apply failed with …`
_OBJECT = re.compile(r"applying object (\S+) \S*, Kind=(\w+): ")
_MARK = "Apply failed with"
# The API server: `conflict with "m" using v1: .data.x` (one), or `conflicts with "m" using v1:` and
# `- .data.x` lines (several); `with subresource "s"`, `using <apiVersion>`, `at <time>` are optional.
_MANAGER = re.compile(r'conflicts? with "((?:[^"\\]|\\.)*)"[^:\n]*?(?: at \S+)?:(?: (.+))?')
_FIELD = re.compile(r"^- (.+)$")


def is_conflict(text: str) -> bool:
    """Whether helm failed on a server-side apply conflict."""
    return _MARK in text and ' with "' in text


def conflicts_in(text: str) -> tuple[FieldConflict, ...]:
    """Each (object, manager) that conflicted, with its fields, from helm's error text."""
    found: dict[tuple[str, str], list[str]] = {}
    marks = [m.start() for m in re.finditer(_MARK, text)]
    for start, end in zip(marks, [*marks[1:], len(text)], strict=True):
        obj = _OBJECT.findall(text, 0, start)
        name = f"{obj[-1][1]} {obj[-1][0].lstrip('/')}" if obj else ""
        manager = None
        for line in text[start:end].splitlines():
            m = _MANAGER.search(line)
            if m is not None:
                manager = m.group(1).replace('\\"', '"')
                fields = found.setdefault((name, manager), [])
                if m.group(2):
                    fields.append(m.group(2).strip())
                continue
            f = _FIELD.match(line.strip())
            if f is not None and manager is not None:
                found[(name, manager)].append(f.group(1))
            elif manager is not None:
                break  # past the conflict list
    return tuple(
        FieldConflict(obj, manager, tuple(dict.fromkeys(fields))) for (obj, manager), fields in found.items()
    )


def describe(conflicts: Iterable[FieldConflict]) -> str:
    return "; ".join(c.summary() for c in conflicts)


def refusal(conflicts: Sequence[FieldConflict], trusted: Sequence[str], mode: str) -> str | None:
    """Why the fields may not be taken back (a message that names who owns what and what to do),
    or None: every one belongs to an untrusted manager, and drift correction is on."""
    if not conflicts:
        return unsettled(conflicts)
    kept = [c for c in conflicts if c.manager in trusted]
    if kept:
        names = ", ".join(sorted({c.manager for c in kept}))
        return (
            f"the chart would change fields that {names} owns: {describe(kept)}; a trusted field "
            f"manager's fields (driftTrustedManagers) are never taken from it: leave them out of what "
            f"the chart renders (or trust that manager no more), {RETRY_HINT}"
        )
    if mode != "enabled":
        return (
            f"the change would overwrite edits made by hand: {describe(conflicts)}; drift mode "
            f"{mode!r} leaves such edits alone: undo them (or annotate helm-operator.io/drift=enabled), "
            f"{RETRY_HINT}"
        )
    return None


def unsettled(conflicts: Sequence[FieldConflict]) -> str:
    """A conflict nothing may settle here (no drift rules at hand, or helm named no field)."""
    return (
        f"the change conflicts with fields other field managers own: "
        f"{describe(conflicts) or 'helm did not say which'}; {RETRY_HINT}"
    )


def still(conflicts: Sequence[FieldConflict]) -> str:
    """A conflict left after the drift correction took back what it may (a field an ignore rule
    leaves alone, or an edit made in between)."""
    return (
        f"the change still conflicts after the drift correction took back what it may: "
        f"{describe(conflicts) or 'helm did not say which fields'}; fields a driftIgnore rule "
        f"leaves alone stay their editor's: undo the edit, {RETRY_HINT}"
    )
