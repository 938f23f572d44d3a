"""Names shared by every layer: labels, annotations, the finalizer, release and owner names."""

from __future__ import annotations

import hashlib
import re

MAX_RELEASE_NAME = 53
_VALID_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

ANNOTATION_PREFIX = "helm-operator.io/"  # every annotation users set for the operator
OWNER_LABEL = "helm-operator.io/owner"  # on every object a release renders; dependent watches select on it
DIGEST_LABEL = "helm-operator.io/digest"  # on Helm's release record: the desired digest it was made for
# On Helm's release record: the revision the operator expected to write. Helm copies a release's
# labels into the next revision, so a revision made by hand (``helm upgrade``) carries an older one.
REVISION_LABEL = "helm-operator.io/revision"
FINALIZER = "helm-operator.io/uninstall"
DRIFT_ANNOTATION = "helm-operator.io/drift"  # "warn": report only; "disabled": no checks
# A resource's own maintenance windows ("<cron> <duration> [<zone>]; …" or "always").
WINDOWS_ANNOTATION = "helm-operator.io/maintenance-windows"
# Apply a waiting change now, outside the windows: once per new value of the annotation.
WINDOW_OVERRIDE_ANNOTATION = "helm-operator.io/apply-outside-window"
# Helm's own field manager (helm 4 applies server-side as "helm", helm 3 updates as "helm"): drift
# corrections made under this name never conflict with the next `helm upgrade`.
HELM_FIELD_MANAGER = "helm"
KOPF_PREFIX = "kopf.helm-operator.io"  # kopf's own bookkeeping on a resource; never a user annotation


def owner_id(group: str, kind: str, namespace: str, name: str) -> str:
    """A label-safe identity of the CR that owns a release; stable across CR re-creation."""
    raw = f"{kind}.{group}/{namespace}/{name}"
    return hashlib.sha256(raw.encode()).hexdigest()[:40]


def release_name(cr_name: str) -> str:
    """The CR name made a valid Helm release name: DNS-1123 label, at most 53 characters.

    A name that is already valid is kept. Otherwise it is lower-cased, dots and other characters
    become ``-``, and a stable hash of the original is appended, so two CR names that clean up
    to the same text still get different releases.
    """
    if len(cr_name) <= MAX_RELEASE_NAME and _VALID_NAME.match(cr_name):
        return cr_name
    suffix = hashlib.sha256(cr_name.encode()).hexdigest()[:8]
    cleaned = re.sub(r"[^a-z0-9-]+", "-", cr_name.lower()).strip("-")
    head = cleaned[: MAX_RELEASE_NAME - len(suffix) - 1].rstrip("-")
    return f"{head}-{suffix}" if head else f"r-{suffix}"


ACTION_ANNOTATION = "helm-operator.io/action"  # "<verb>[=<argument>]": run a day-2 action once
# Any new value forgets the failure memory: a stalled resource is tried again at once.
RETRY_ANNOTATION = "helm-operator.io/retry"
# A semantic-version range choosing which of a watch's chart versions serves the resource.
CHART_VERSION_ANNOTATION = "helm-operator.io/chart-version"
# Plan and approve: "manual" or "automatic" for one resource, and the id of the plan approved.
APPROVAL_ANNOTATION = "helm-operator.io/approval"
APPROVE_ANNOTATION = "helm-operator.io/approve"
# What a resource waits for before Helm acts for it (``release.dependencies``).
DEPENDS_ON_ANNOTATION = "helm-operator.io/depends-on"
# Staged rollouts: on Helm's release record, the fleet inputs (chart and overrideValues) it was
# made from; on a resource, the wave of a rollout that admitted it ("<rollout>:<wave>[:rollback]").
FLEET_LABEL = "helm-operator.io/fleet"
ROLLOUT_ANNOTATION = "helm-operator.io/rollout"
# The operator's own kind: one Rollout per watch with a rollout policy (its progress and steering).
ROLLOUT_GROUP, ROLLOUT_VERSION, ROLLOUT_KIND, ROLLOUT_PLURAL = (
    "helm-operator.io",
    "v1alpha1",
    "Rollout",
    "rollouts",
)
FORCE_UNINSTALL_ANNOTATION = "helm-operator.io/force-uninstall"  # "true": uninstall despite failing hooks
DAY2_LABEL = "helm-operator.io/day2-of"  # on objects day-2 hooks create (backup Jobs): the owner id

# The ValidatingWebhookConfiguration of a converted CRD: writes checked to be readable in every version.
READABLE_WEBHOOK = "helm-operator.readable.{crd}"
