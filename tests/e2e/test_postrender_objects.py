"""The objects an action's post-render names are exactly those Helm keeps in the release's manifest.

A revision the operator just made is read for readiness (and its kinds chosen for the dependent
watches) from what the post-render saw, not from a parse of its manifest; so with the real helm
(4 and 3) and a chart written as public charts are (a hook Job, cluster-scoped RBAC, a
``namespaceOverride`` helper), the names must match what ``helm`` stored.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kubernetes import client, config

from helm_operator.adapters import storage
from helm_operator.adapters.helm import Applied, HelmSettings
from helm_operator.adapters.helm import Helm as HelmAdapter
from helm_operator.config.charts import ChartRef
from helm_operator.core.naming import OWNER_LABEL
from helm_operator.dev.devcluster import DevCluster
from helm_operator.drift.check import manifest_ids

from .conftest import Helm

CHART = Path(__file__).parent / "charts" / "realworld"


def test_post_rendered_objects_are_the_stored_manifests(
    helm: Helm, cluster: DevCluster, solo_namespace: str, tmp_path: Path
) -> None:
    ns = solo_namespace
    adapter = HelmAdapter(
        HelmSettings(
            executable=str(helm.binary),
            kubeconfig=cluster.kubeconfig,
            max_processes=1,
            workdir=tmp_path / "work",
            chart_cache=tmp_path / "charts",
        )
    )
    api = config.new_client_from_config(str(cluster.kubeconfig))
    core = client.CoreV1Api(api)
    values = {"hook": {"enabled": True}}  # a pre-upgrade hook: rendered (and post-rendered) at install

    async def install() -> Applied:
        return await adapter.install_or_upgrade(
            "po",
            ns,
            ChartRef(ref=str(CHART), path=CHART),
            values,
            labels={OWNER_LABEL: "po-owner"},
            timeout=120,
            wait=False,
            history_max=3,
            scopes={},
            server_side=True,
        )

    try:
        applied = asyncio.run(install())
        assert applied.objects is not None, "no post-render served the call"
        named = sorted(applied.objects)
        stored = storage.latest_release(core, "po", ns)
        assert stored is not None and stored.objects is None  # read from the storage: parsed
        assert named == sorted(manifest_ids(stored))
        kinds = {o.kind for o in named}
        assert {"Deployment", "Service", "ClusterRole", "HorizontalPodAutoscaler"} <= kinds
        assert "Job" not in kinds  # the hook Job is Helm's hook, not part of the manifest
        hooks = applied.printed.get("hooks") or []
        assert any("kind: Job" in h.get("manifest", "") for h in hooks), hooks
    finally:
        helm("uninstall", "po", "-n", ns, check=False)
        api.close()
