"""Static shards: which custom resources (and which of their objects) one operator instance serves.

An instance started with ``--shard NAME`` serves the resources labelled ``SHARD_LABEL=NAME``; one
started ``--unsharded`` serves those without the label; one started with neither serves all (one
instance, or replicas under leader election). The shard becomes part of every selector the
instance sends to the API server: the custom resources, the objects its releases create (they
carry the shard label too) and Helm's release Secrets (labelled through ``helm --labels``), so each
instance lists, watches and caches only its share.

A resource relabelled to another shard leaves one instance's watches and enters the other's; the
new owner upgrades its release once (the shard is part of the release's digest), which moves the
label on its objects and its release record along with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SHARD_LABEL = "sharding.helm-operator.io/shard"
UNSHARDED = ""  # the shard of an instance that serves only resources without the label

Shard = str | None  # None: not sharded (serves every resource); "": unsharded; else the shard's name

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def shard_problem(name: str) -> str | None:
    """What makes ``name`` unusable as a shard, or None. A shard names a label value and a Lease,
    so it is a DNS label (the stricter of the two)."""
    if name == UNSHARDED:
        return None
    if len(name) > 40 or not _DNS_LABEL.fullmatch(name):
        return (
            f"shard {name!r} is not a DNS label of at most 40 characters (a-z, 0-9 and '-', "
            "beginning and ending with a letter or digit)"
        )
    return None


def requirement(shard: Shard) -> str | None:
    """The shard's term of a ``labelSelector`` query, or None when not sharded."""
    if shard is None:
        return None
    return f"!{SHARD_LABEL}" if shard == UNSHARDED else f"{SHARD_LABEL}={shard}"


def expression(shard: str) -> dict[str, Any]:
    """The shard as a ``matchExpressions`` entry (for a watch's selector)."""
    if shard == UNSHARDED:
        return {"key": SHARD_LABEL, "operator": "DoesNotExist"}
    return {"key": SHARD_LABEL, "operator": "In", "values": [shard]}


def selector(base: str, shard: Shard, ring: Ring | None = None) -> str:
    """``base`` (a ``labelSelector`` query) limited to the static shard and the ring's shard."""
    terms = [t for t in (requirement(shard), ring.requirement() if ring else None) if t]
    return ",".join([base, *terms])


def holds(query: str, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` meet every term of a ``labelSelector`` query made of ``key``, ``!key``
    and ``key=value`` terms (the ones this module writes)."""
    for term in query.split(","):
        key, eq, value = term.partition("=")
        if term.startswith("!"):
            if term[1:] in labels:
                return False
        elif (labels.get(key) != value) if eq else (key not in labels):
            return False
    return True


MEMBERS_LIMIT = 32 * 1024  # characters of a set-based term: a watch's request line stays small


def members(key: str, values: Iterable[str], limit: int = MEMBERS_LIMIT) -> str | None:
    """``key in (a,b,...)``: a term for objects labelled with one of the values an instance holds,
    for what no shard label can mark (a label on pod templates would restart workloads at every
    move; Helm rewrites a superseded revision's Secret with the labels it recorded). None when there
    are none, or too many for one request (then the caller watches by ``key`` alone and filters)."""
    held = sorted(set(values))
    term = f"{key} in ({','.join(held)})"
    return term if held and len(term) <= limit else None


def object_labels(shard: Shard) -> dict[str, str]:
    """The labels every object of a release (and its release record) carries for the shard."""
    return {SHARD_LABEL: shard} if shard else {}


def lease_name(base: str, shard: Shard) -> str:
    """The leader-election Lease of the instances serving one shard (each shard elects its own)."""
    if shard is None:
        return base
    return f"{base}-unsharded" if shard == UNSHARDED else f"{base}-shard-{shard}"


def describe(shard: Shard) -> str:
    """What an instance serves, for its start-up log line."""
    if shard is None:
        return "not sharded: every resource"
    if shard == UNSHARDED:
        return f"unsharded: only resources without the {SHARD_LABEL} label"
    return f"shard {shard}: only resources labelled {SHARD_LABEL}={shard}"


RING_PREFIX = "alpha.sharding.timebertt.dev"


@dataclass(frozen=True)
class Ring:
    """Dynamic sharding: this instance is one shard of a ``ControllerRing`` of the
    controller-sharding sharder (github.com/timebertt/kubernetes-controller-sharding), which
    assigns each custom resource to a shard by labelling it. The contract an instance honours:

    * it holds its own Lease, named ``shard`` with ``holderIdentity`` = ``shard`` and labelled
      ``LEASE_LABEL=<ring>``, and acts only while it holds it (the sharder counts the shard as
      available while the Lease is current);
    * it watches only resources labelled ``shard_label=<shard>``;
    * when the sharder adds ``drain_label`` to one of them, it stops acting for it and removes both
      labels; only then does the sharder assign it to another shard.

    A move changes neither the release nor its digest: no new revision.
    """

    name: str  # the ControllerRing
    shard: str  # this instance: its Lease's name and holderIdentity

    LEASE_LABEL = f"{RING_PREFIX}/controllerring"

    @property
    def shard_label(self) -> str:
        return f"shard.{RING_PREFIX}/{self.name}"

    @property
    def drain_label(self) -> str:
        return f"drain.{RING_PREFIX}/{self.name}"

    def requirement(self) -> str:
        """This shard's term of a ``labelSelector`` query (the sharder labels the objects a
        resource controls as it labels the resource)."""
        return f"{self.shard_label}={self.shard}"

    def expression(self) -> dict[str, Any]:
        """The ring's selector for this shard's resources, as a ``matchExpressions`` entry."""
        return {"key": self.shard_label, "operator": "In", "values": [self.shard]}

    def problems(self) -> list[str]:
        """What the sharder or the API server would refuse in these names."""
        out = []
        if len(self.name) > 63 or not _DNS_LABEL.fullmatch(self.name):
            out.append(f"--controller-ring {self.name!r} is not a DNS label (at most 63 characters)")
        if len(self.shard) > 63 or not _DNS_LABEL.fullmatch(self.shard):
            out.append(
                f"--shard-name {self.shard!r} is not a DNS label of at most 63 characters (it names the "
                "shard's Lease and is a label value)"
            )
        return out
