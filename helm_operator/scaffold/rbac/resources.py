"""What the API serves that RBAC names: the verbs, the scopes, the built-in resources' table."""

from __future__ import annotations

from dataclasses import dataclass

HELM_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
READ_VERBS = ("get", "list", "watch")
LEASE_VERBS = ("get", "list", "watch", "create", "update", "patch")
CRD_GROUP = "apiextensions.k8s.io"
VERB_ORDER = (*HELM_VERBS, "deletecollection", "bind", "escalate", "impersonate")
RBAC_GROUP = "rbac.authorization.k8s.io"

CLUSTER = "cluster"  # a grant the operator needs cluster-wide
NAMESPACE = "namespace"  # a grant the operator needs in the namespaces it serves


class RbacError(Exception):
    """Why the rules cannot be derived; the message names the chart, file or kind."""


@dataclass(frozen=True)
class ApiResource:
    """How the API serves a kind: its group, plural and scope."""

    group: str
    plural: str
    namespaced: bool


def _table(group: str, namespaced: bool, *pairs: tuple[str, str]) -> dict[tuple[str, str], ApiResource]:
    return {(group, kind): ApiResource(group, plural, namespaced) for kind, plural in pairs}


# The kinds every cluster serves, so the command works offline; anything else comes from API
# discovery (--kubeconfig) or a CustomResourceDefinition (the project's crds/ or a chart's own).
BUILTIN: dict[tuple[str, str], ApiResource] = {
    **_table(
        "",
        True,
        ("ConfigMap", "configmaps"),
        ("Endpoints", "endpoints"),
        ("Event", "events"),
        ("LimitRange", "limitranges"),
        ("PersistentVolumeClaim", "persistentvolumeclaims"),
        ("Pod", "pods"),
        ("PodTemplate", "podtemplates"),
        ("ReplicationController", "replicationcontrollers"),
        ("ResourceQuota", "resourcequotas"),
        ("Secret", "secrets"),
        ("Service", "services"),
        ("ServiceAccount", "serviceaccounts"),
    ),
    **_table(
        "", False, ("Namespace", "namespaces"), ("Node", "nodes"), ("PersistentVolume", "persistentvolumes")
    ),
    **_table(
        "apps",
        True,
        ("ControllerRevision", "controllerrevisions"),
        ("DaemonSet", "daemonsets"),
        ("Deployment", "deployments"),
        ("ReplicaSet", "replicasets"),
        ("StatefulSet", "statefulsets"),
    ),
    **_table("batch", True, ("CronJob", "cronjobs"), ("Job", "jobs")),
    **_table("autoscaling", True, ("HorizontalPodAutoscaler", "horizontalpodautoscalers")),
    **_table("policy", True, ("PodDisruptionBudget", "poddisruptionbudgets")),
    **_table("networking.k8s.io", True, ("Ingress", "ingresses"), ("NetworkPolicy", "networkpolicies")),
    **_table("networking.k8s.io", False, ("IngressClass", "ingressclasses")),
    **_table("discovery.k8s.io", True, ("EndpointSlice", "endpointslices")),
    **_table("coordination.k8s.io", True, ("Lease", "leases")),
    **_table("events.k8s.io", True, ("Event", "events")),
    **_table(RBAC_GROUP, True, ("Role", "roles"), ("RoleBinding", "rolebindings")),
    **_table(
        RBAC_GROUP, False, ("ClusterRole", "clusterroles"), ("ClusterRoleBinding", "clusterrolebindings")
    ),
    **_table(
        "storage.k8s.io",
        False,
        ("CSIDriver", "csidrivers"),
        ("StorageClass", "storageclasses"),
        ("VolumeAttachment", "volumeattachments"),
    ),
    **_table("scheduling.k8s.io", False, ("PriorityClass", "priorityclasses")),
    **_table("node.k8s.io", False, ("RuntimeClass", "runtimeclasses")),
    **_table("apiextensions.k8s.io", False, ("CustomResourceDefinition", "customresourcedefinitions")),
    **_table("apiregistration.k8s.io", False, ("APIService", "apiservices")),
    **_table(
        "admissionregistration.k8s.io",
        False,
        ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
        ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
        ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
        ("ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings"),
    ),
    **_table("certificates.k8s.io", False, ("CertificateSigningRequest", "certificatesigningrequests")),
}

# What Helm reads beneath a kind while it waits for it to be ready (kstatus in Helm 4, its own
# readiness checks in Helm 3): a Deployment's ReplicaSets and their Pods, a StatefulSet's Pods, ...
GENERATED: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {
    ("apps", "Deployment"): (("apps", "ReplicaSet"), ("", "Pod")),
    ("apps", "ReplicaSet"): (("", "Pod"),),
    ("apps", "StatefulSet"): (("", "Pod"),),
    ("apps", "DaemonSet"): (("", "Pod"),),
    ("batch", "Job"): (("", "Pod"),),
    ("batch", "CronJob"): (("batch", "Job"), ("", "Pod")),
}

# What a hook's ``ctx.kube.<call>`` needs (``create`` reads the object back when it exists).
HOOK_CALLS: dict[str, tuple[str, ...]] = {
    "get": ("get",),
    "list": ("list",),
    "create": ("create", "get"),
    "patch": ("patch", "get"),
    "delete": ("delete",),
}
BUILTIN_HOOKS = "helm_operator.hooks.builtin"
FACADE = "helm_operator.hooks"  # what a hook module imports: its names are the built-ins' own


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]
