"""Field conflicts of Helm 4's server-side apply: an upgrade or rollback that would change a field
another field manager owns (a ``kubectl edit``, a controller) fails without ``--force-conflicts``.
A manager keeps owning a field it once set even when its value is put back as it was, so the
conflict comes whatever the value now is.

Forcing every such field would also take fields from trusted managers (an autoscaler's replicas),
which drift correction leaves alone. So a conflict is settled by the drift rules instead: the
objects that conflicted with untrusted managers only are applied as Helm's refused try had them,
taking those fields (the ignored and trusted ones left out, as a drift correction leaves them),
and the action goes on; a conflict with a trusted manager, or under a drift mode that leaves hand
edits alone, is a stall that names who owns what (``refusal``). Pure: parsing of what the API
server said, and the decision.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

RETRY_HINT = "then annotate the resource helm-operator.io/retry=<a new value>"


@dataclass(frozen=True)
class FieldConflict:
    """Fields of one object that one other field manager owns."""

    kind: str  # "" when the message did not name the object
    namespace: str  # "" for a cluster-scoped object
    name: str
    manager: str
    fields: tuple[str, ...]

    @property
    def obj(self) -> str:
        """``ConfigMap ns/name``, as messages name it ("" when unknown)."""
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}" if self.kind else ""

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
    found: dict[tuple[str, str, str, str], list[str]] = {}
    marks = [m.start() for m in re.finditer(_MARK, text)]
    for start, end in zip(marks, [*marks[1:], len(text)], strict=True):
        obj = _OBJECT.findall(text, 0, start)
        where, kind = obj[-1] if obj else ("", "")
        namespace, _, name = where.rpartition("/")
        manager = None
        for line in text[start:end].splitlines():
            m = _MANAGER.search(line)
            if m is not None:
                manager = m.group(1).replace('\\"', '"')
                fields = found.setdefault((kind, namespace, name, manager), [])
                if m.group(2):
                    fields.append(m.group(2).strip())
                continue
            f = _FIELD.match(line.strip())
            if f is not None and manager is not None:
                found[(kind, namespace, name, manager)].append(f.group(1))
            elif manager is not None:
                break  # past the conflict list
    return tuple(FieldConflict(*key, tuple(dict.fromkeys(fields))) for key, fields in found.items())


def describe(conflicts: Iterable[FieldConflict]) -> str:
    return "; ".join(c.summary() for c in conflicts)


def refusal(conflicts: Sequence[FieldConflict], trusted: Sequence[str], mode: str) -> str | None:
    """Why the fields may not be taken back (a message that names who owns what and what to do),
    or None: every one belongs to an untrusted manager, and drift correction is on."""
    if not conflicts or not all(c.kind for c in conflicts):
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
            f"the change would overwrite fields edited by hand: {describe(conflicts)}; drift mode "
            f"{mode!r} leaves such edits alone (and so Helm's try failed part-way: objects it applied "
            f"before the conflict run the change): annotate helm-operator.io/drift=enabled to let "
            f"the operator take those fields (it tries again at once), or change the spec back"
        )
    return None


def unsettled(conflicts: Sequence[FieldConflict]) -> str:
    """A conflict nothing may settle here (no drift rules at hand, or helm named no field)."""
    return (
        f"the change conflicts with fields other field managers own: "
        f"{describe(conflicts) or 'helm did not say which'}; {RETRY_HINT}"
    )


def still(conflicts: Sequence[FieldConflict]) -> str:
    """A conflict left after the fields were taken (a field a driftIgnore rule leaves alone, or
    an edit made in between)."""
    return (
        f"the change still conflicts after the operator took the fields it may: "
        f"{describe(conflicts) or 'helm did not say which fields'}; a field a driftIgnore rule "
        f"leaves alone stays its editor's: leave it out of the chart or stop ignoring it, {RETRY_HINT}"
    )
