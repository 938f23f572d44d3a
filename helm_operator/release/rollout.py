"""Staged rollouts (pure): which wave each resource of a watch belongs to, how a rollout moves
from wave to wave, and what a resource may do while one runs.

A rollout is a change of the fleet's inputs: the chart (a new version shipped with the operator)
or ``overrideValues``. Its id is a digest of them (``rollout_id``); Helm's release record carries
the digest of the inputs it was made from (``FLEET_LABEL``: ``fleet_digest``). A resource whose
release runs other inputs than it would now waits for its wave: the driver admits a wave by
marking its resources (``ROLLOUT_ANNOTATION``: ``<rollout>:<wave>``), counts a wave done once
every resource of it runs the new inputs and was Ready for ``minReadySeconds``, and halts the
rollout when more than ``maxFailures`` of a wave failed, marking that wave for rollback
(``…:rollback``): those resources go back to the revision they ran before, the waves after it
never move. A change of a resource's own spec is not the fleet's and is not staged, unless the
resource still runs older fleet inputs (then it waits with them).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from helm_operator.config.rollout import REST, Policy
from helm_operator.config.watches import selector_matches
from helm_operator.core.vocabulary import EventType, Reason

Phase = Literal["Progressing", "Paused", "Halted", "Complete", "Aborted"]
# What a resource reports of itself (status.rollout.state).
UPDATED, WAITING, FAILED, ROLLED_BACK = "Updated", "Waiting", "Failed", "RolledBack"
WAITING_NAMED = 5  # resources a wave's message names as holding it up
FAILURE_SHOWN = 300  # characters of a resource's failure the Rollout keeps (the resource has it all)
MEMBERS_LISTED = 50  # resources a wave's record lists by name (its ``resources`` counts them all)


def fleet_digest(chart_name: str, chart_version: str, chart_digest: str, overrides: Mapping[str, Any]) -> str:
    """The fleet inputs one release is made from: its chart (name, version, files) and the
    watch's ``overrideValues``."""
    raw = json.dumps([chart_name, chart_version, chart_digest, overrides], sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


def rollout_id(fleets: Iterable[str]) -> str:
    """A watch's rollout: the fleet inputs of every chart version it serves, together."""
    return hashlib.sha256(",".join(sorted(fleets)).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Mark:
    """What the driver wrote on a resource: the rollout and wave that admitted it (``attempt``: a
    retried wave's try), or that its wave failed and it goes back (``rollback``)."""

    rollout: str
    wave: str
    rollback: bool = False
    attempt: int = 0

    def text(self) -> str:
        tried = f":{self.attempt}" if self.attempt else ""
        return f"{self.rollout}:{self.wave}{tried}" + (":rollback" if self.rollback else "")


def mark_of(annotation: str | None) -> Mark | None:
    """``<rollout>:<wave>[:<attempt>][:rollback]`` read back (None: not a mark)."""
    if not annotation:
        return None
    parts = annotation.split(":")
    rollback = parts[-1] == "rollback"
    if rollback:
        parts = parts[:-1]
    attempt = 0
    if len(parts) == 3 and parts[2].isdigit():
        attempt = int(parts.pop())
    if len(parts) != 2 or not all(parts):
        return None
    return Mark(parts[0], parts[1], rollback, attempt)


# --- a resource's side --------------------------------------------------------------------------


@dataclass(frozen=True)
class Admission:
    """What a rollout says about one resource's upgrade this turn."""

    proceed: bool = True
    rollback: bool = False  # its wave failed and its release runs the new inputs: roll it back
    waiting: str | None = None  # why it waits (the message ``Ready`` carries)


def admission(
    governed: bool,
    running: str | None,
    target: str,
    current: str,
    mark: Mark | None,
    phase: str | None,
    own_change: bool = False,
) -> Admission:
    """``governed``: the decided action is an upgrade; ``running``: the fleet inputs of the running
    release (None: made before rollouts were tracked); ``target``: what this resource's release
    would be made from now; ``current``: the watch's rollout id; ``mark``: what the driver wrote
    on it; ``phase``: the watch's rollout as its object says (None: not read, or none yet);
    ``own_change``: the resource's spec changed since its running release was made. After an
    abort a resource that never moved keeps what it runs, until a change of its own (which can
    only be made with the inputs the watch serves now)."""
    ours = mark is not None and mark.rollout == current
    if ours and mark is not None and mark.rollback:
        if running == target:
            return Admission(proceed=False, rollback=True)
        return Admission(
            proceed=False, waiting=f"its wave {mark.wave} failed: it stays on the version it ran before"
        )
    if not governed or running == target:
        return Admission()  # not a change of the fleet's inputs (a first install, a spec change)
    if ours:
        return Admission()
    if phase == "Complete":
        return Admission()  # a latecomer: the rollout is done, nothing to stage it against
    if phase == "Aborted":
        if own_change:
            return Admission()
        return Admission(
            proceed=False, waiting=f"rollout {current} was aborted (a change of its own spec applies it)"
        )
    if phase is None:
        return Admission(proceed=False, waiting=f"rollout {current} has not started")
    return Admission(proceed=False, waiting=f"it waits for its wave of rollout {current}")


def resource_status(
    current: str, target: str, running: str | None, mark: Mark | None, outcome_phase: str, waiting: bool
) -> dict[str, Any]:
    """``status.rollout`` of a resource: what it runs, what it would run and where it stands."""
    if mark is not None and mark.rollout == current and mark.rollback and running != target:
        state = ROLLED_BACK
    elif waiting:
        state = WAITING
    elif outcome_phase in ("failed", "stalled"):
        state = FAILED
    elif running == target and outcome_phase == "ready":
        state = UPDATED
    else:
        state = "Updating"
    ours = mark is not None and mark.rollout == current
    wave, acted = (mark.wave, mark.text()) if mark is not None and ours else (None, None)
    return {
        "rollout": current,
        "target": target,
        "running": running,
        "wave": wave,
        "mark": acted,
        "state": state,
    }


# --- the driver's side --------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """A resource of the fleet, as the driver sees it."""

    key: str  # "<namespace>/<name>" (or "<name>" cluster-scoped)
    labels: Mapping[str, str] = field(default_factory=dict)
    mark: Mark | None = None
    updated: bool = False  # runs the rollout's inputs, Ready on the current generation
    failed: str | None = None  # why its change failed (None: not failed)
    waits: str | None = None  # what it says it waits for while not updated (a window, an approval)


def member_of(body: Mapping[str, Any], current: str, mark: Mark | None) -> Member:
    meta = body.get("metadata") or {}
    key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta.get("name"))
    status = body.get("status") or {}
    mine = status.get("rollout") or {}
    ready: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {}
    )
    # Written by a turn on its current generation: the Reconciling condition always speaks of it
    # (observedGeneration stays on the running release's while a gate holds a spec change).
    turned = next(
        (
            c.get("observedGeneration")
            for c in status.get("conditions") or []
            if c.get("type") == "Reconciling"
        ),
        status.get("observedGeneration"),
    )
    fresh = turned == meta.get("generation")
    on_it = mine.get("rollout") == current and fresh
    updated = (
        on_it and mine.get("state") == UPDATED and mine.get("running") == mine.get("target")
    ) and ready.get("status") == "True"
    failed = None  # a failure reported under the mark it carries now (not an earlier try's)
    if on_it and mine.get("state") == FAILED and mark is not None and mine.get("mark") == mark.text():
        said = f"{ready.get('reason', 'Failed')}: {ready.get('message', '')}"
        failed = said if len(said) <= FAILURE_SHOWN else said[: FAILURE_SHOWN - 1].rstrip() + "…"
    waits = None
    if not updated and failed is None:
        reconciling: Mapping[str, Any] = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "Reconciling"), {}
        )
        if reconciling.get("status") == "True" and reconciling.get("reason"):
            waits = str(reconciling["reason"])
    return Member(key, dict(meta.get("labels") or {}), mark, bool(updated), failed, waits)


def _order(key: str) -> str:
    """A stable order of the fleet that is not alphabetical (percent waves spread over it)."""
    return hashlib.sha256(key.encode()).hexdigest()


def assign(policy: Policy, members: Sequence[Member]) -> dict[str, list[Member]]:
    """Each resource's wave: the first declared wave that takes it. A selector wave takes what it
    matches; a percent wave takes, in the fleet's stable order, resources (matching its selector
    if it has one) until the waves so far hold that share of the fleet; ``rest`` takes the others."""
    waves: dict[str, list[Member]] = {name: [] for name in policy.names()}
    left = sorted(members, key=lambda m: _order(m.key))
    total, taken = len(members), 0
    for wave in policy.waves:
        quota = math.ceil(wave.percent * total / 100) - taken if wave.percent is not None else len(left)
        keep = []
        for m in left:
            if quota > 0 and (wave.selector is None or selector_matches(wave.selector, m.labels)):
                waves[wave.name].append(m)
                quota -= 1
                taken += 1
            else:
                keep.append(m)
        left = keep
    if left:
        waves[REST].extend(left)
    return waves


@dataclass
class Step:
    """What one look at the fleet decided: the rollout's new status, the marks to write on
    resources, and what to say."""

    status: dict[str, Any]
    marks: dict[str, Mark] = field(default_factory=dict)
    events: list[tuple[EventType, Reason, str]] = field(default_factory=list)
    wake: list[str] = field(default_factory=list)  # resources to look at again now (what they wait for ended)


def _stamp(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(stamp: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None


def _fresh(
    policy: Policy, current: str, previous: str | None, retries: int, now: dt.datetime
) -> dict[str, Any]:
    """A new rollout's status; the retries asked for so far (``spec.retries``) are its baseline:
    only a retry asked for during this rollout retries its halted wave."""
    return {
        "rollout": current,
        "previous": previous,
        "phase": "Progressing",
        "wave": policy.names()[0],
        "startedAt": _stamp(now),
        "retries": retries,
        "waves": [{"name": n} for n in policy.names()],
    }


def advance(
    policy: Policy,
    current: str,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    members: Sequence[Member],
    now: dt.datetime,
) -> Step:
    """One look at the fleet by the rollout's driver (``spec``: ``paused``, ``abort`` (a rollout
    id), ``retries`` (a count: one more retries the halted wave))."""
    st: dict[str, Any] = json.loads(json.dumps(dict(status)))  # a copy to change
    step = Step(st)
    if st.get("rollout") != current:
        st.clear()
        st.update(_fresh(policy, current, status.get("rollout"), int(spec.get("retries") or 0), now))
        paused = " paused (spec.paused is set: resume to go on)" if spec.get("paused") else ""
        step.events.append((EventType.NORMAL, Reason.ROLLOUT_STARTED, f"rollout {current} started{paused}"))
    waves = assign(policy, members)
    names = list(waves)
    records = {w["name"]: w for w in st.get("waves") or []}
    st["waves"] = [records.get(n, {"name": n}) for n in names]
    for rec in st["waves"]:
        group = waves[rec["name"]]
        # Who is in it, before it starts too: a percent wave's share is not predictable by hand.
        rec.update(
            resources=len(group),
            updated=sum(m.updated for m in group),
            members=sorted(m.key for m in group)[:MEMBERS_LISTED],
        )
        # Failures stay counted for the rollout: a rolled back, retried or later updated resource
        # failed all the same.
        rec["failed"] = max(int(rec.get("failed") or 0), sum(m.failed is not None for m in group))
    st["updated"] = f"{sum(m.updated for m in members)}/{len(members)}"
    phase = st.get("phase")
    if phase in ("Complete", "Aborted"):
        return step
    if spec.get("abort") == current:
        st.update(
            phase="Aborted",
            message="aborted: resources that did not move keep what they run until a change of their own",
        )
        step.events.append((EventType.WARNING, Reason.ROLLOUT_ABORTED, f"rollout {current} aborted"))
        # Those waiting for a wave wait no more: told now, not at their next resync.
        step.wake = sorted(m.key for m in members if not m.updated)
        return step
    if phase == "Halted":
        retries = int(spec.get("retries") or 0)
        if retries <= int(st.get("retries") or 0):
            return step
        st["retries"] = retries
        rec = next(r for r in st["waves"] if r["name"] == st["wave"])
        for k in ("admittedAt", "readyAt"):
            rec.pop(k, None)
        st.pop("failures", None)
        st.update(phase="Progressing", message=f"wave {st['wave']} retried")
        step.events.append(
            (EventType.NORMAL, Reason.ROLLOUT_RESUMED, f"rollout {current}: wave {st['wave']} retried")
        )
    if spec.get("paused"):
        if phase != "Paused":
            st.update(phase="Paused", message=f"paused at wave {st['wave']}")
            step.events.append(
                (EventType.NORMAL, Reason.ROLLOUT_PAUSED, f"rollout {current} paused at wave {st['wave']}")
            )
        return step
    if st.get("phase") == "Paused":
        st.update(phase="Progressing")
        step.events.append(
            (EventType.NORMAL, Reason.ROLLOUT_RESUMED, f"rollout {current} resumed at wave {st['wave']}")
        )
    _progress(policy, current, st, waves, names, now, step)
    return step


def _waiting(group: Sequence[Member]) -> str:
    """Who holds a wave up, each with what its ``Reconciling`` says (waiting for a window, an
    approval, a dependency; or still upgrading)."""
    held = sorted((m.key, m.waits) for m in group if not m.updated and m.failed is None and m.waits)
    if not held:
        return ""
    named = ", ".join(f"{key} ({why})" for key, why in held[:WAITING_NAMED])
    more = f" and {len(held) - WAITING_NAMED} more" if len(held) > WAITING_NAMED else ""
    return f"; not updated yet: {named}{more}"


def _progress(
    policy: Policy,
    current: str,
    st: dict[str, Any],
    waves: Mapping[str, Sequence[Member]],
    names: list[str],
    now: dt.datetime,
    step: Step,
) -> None:
    index = names.index(st["wave"]) if st.get("wave") in names else 0
    while True:
        name = names[index]
        st["wave"] = name
        rec = st["waves"][index]
        group = waves[name]
        if rec.get("admittedAt") is None:
            before = _time(st["waves"][index - 1].get("completedAt")) if index > 0 else None
            opens = before + dt.timedelta(seconds=policy.pause) if before else now  # between waves only
            # Nothing of it to move (all updated, or none in it): no time to watch it go first.
            if now < opens and not all(m.updated for m in group):
                st["message"] = f"wave {name} starts at {_stamp(opens)} (pause between waves)"
                return
            rec["admittedAt"] = _stamp(now)
            count = f"{len(group)} resource" + ("" if len(group) == 1 else "s")
            say = f"rollout {current}: wave {name} started ({count})"
            step.events.append((EventType.NORMAL, Reason.WAVE_STARTED, say))
        admit = Mark(current, name, attempt=int(st.get("retries") or 0))
        for m in group:  # admitted, and whoever joined the wave since
            if not m.updated and m.mark != admit:
                step.marks[m.key] = admit
        admitted = _time(rec["admittedAt"]) or now
        late = now - admitted > dt.timedelta(seconds=policy.progress_deadline)
        failures = {m.key: m.failed for m in group if m.failed is not None and m.mark == admit}
        if late:
            deadline = f"not Ready on the new version within {policy.progress_deadline:.0f}s"
            failures.update({m.key: deadline for m in group if not m.updated and m.key not in failures})
        if len(failures) > policy.max_failures:
            back = "what of it runs the new inputs goes back to what it ran before"
            st.update(
                phase="Halted",
                failures=[{"resource": k, "message": v} for k, v in sorted(failures.items())],
                message=(
                    f"wave {name}: {len(failures)} failed (at most {policy.max_failures} allowed); "
                    f"{back}, the waves after it do not start"
                ),
            )
            rec["failed"] = max(rec["failed"], len(failures))  # those past the deadline too
            rec.pop("readyAt", None)
            for m in group:
                step.marks[m.key] = Mark(current, name, rollback=True, attempt=admit.attempt)
            who = ", ".join(sorted(failures)[:10])
            say = f"rollout {current} halted: wave {name} had {len(failures)} failed ({who}); {back}"
            step.events.append((EventType.WARNING, Reason.ROLLOUT_HALTED, say))
            return
        if not all(m.updated for m in group):
            rec.pop("readyAt", None)
            st["message"] = f"wave {name}: {rec['updated']}/{len(group)} updated and Ready" + _waiting(group)
            return
        ready_at = _time(rec.get("readyAt")) or now
        rec["readyAt"] = _stamp(ready_at)
        if now - ready_at < dt.timedelta(seconds=policy.min_ready_seconds):
            st["message"] = f"wave {name}: all Ready; counted after {policy.min_ready_seconds:.0f}s Ready"
            return
        rec["completedAt"] = _stamp(now)
        step.events.append(
            (EventType.NORMAL, Reason.WAVE_COMPLETED, f"rollout {current}: wave {name} completed")
        )
        if index == len(names) - 1:
            st.update(phase="Complete", completedAt=_stamp(now), message="every wave completed")
            step.events.append((EventType.NORMAL, Reason.ROLLOUT_COMPLETED, f"rollout {current} completed"))
            return
        index += 1
