"""``helm-operator init``: the skeleton of a new operator project.

The project gets what this repository ships for its sample operator, rendered by the same code
(``scaffold/deploy.py``): a Dockerfile installing a released helm-operator, deploy manifests with
the base RBAC every operator needs, and empty folders for charts, CRDs, samples and hooks. Existing
files are never overwritten unless asked (``force``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from helm_operator import __version__
from helm_operator.scaffold import deploy, rbac

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME = 40  # leaves room for "-system", "-leader-election", "-metrics" within 63 characters
RBAC_COMMAND = f"helm-operator rbac --watches-file watches.yaml --out config/{deploy.RBAC_FILE}"
HEADER = "# Written by `helm-operator init`; yours to edit.\n"
FOLDERS = ("charts", "crds", "samples", "hooks")


class InitError(Exception):
    """Why the project cannot be created; nothing was written."""


@dataclass(frozen=True)
class Project:
    directory: Path
    name: str
    image: str
    version: str = __version__  # the helm-operator release the Dockerfile installs
    shards: tuple[str, ...] = ()  # static shards: a Deployment per shard, and an unsharded one
    ring: str | None = None  # dynamic shards: the replicas are shards of this ControllerRing


def default_name(directory: Path) -> str:
    """A Kubernetes-friendly name from the folder's name (``My_Operator`` -> ``my-operator``)."""
    return re.sub(r"[^a-z0-9]+", "-", directory.resolve().name.lower()).strip("-")[:MAX_NAME].strip("-")


def check_name(name: str) -> None:
    if not _NAME.match(name) or len(name) > MAX_NAME:
        raise InitError(
            f"invalid name {name!r}: expected lower-case letters, digits and '-' (at most {MAX_NAME}, "
            "starting and ending with a letter or digit); pass --name"
        )


WATCHES = """\
# Which chart serves which custom resource kind; `helm-operator create-api` adds entries.
# Every resource's `spec` becomes its chart's values; chart paths are relative to this file.
# An entry (Operator SDK's Helm-operator format, plus helm-operator's own optional fields):
#
# - group: cache.example.com
#   version: v1alpha1
#   kind: Memcached
#   chart: charts/memcached
#   # optional: reconcilePeriod: 5m, maxConcurrentReconciles: 2, overrideValues: {...},
#   #           hooks: hooks/memcached.py (day-2 hooks), allowedNamespaces: [...], ...
[]
"""


def _readme(p: Project) -> str:
    d = deploy.Deploy(name=p.name, namespace=f"{p.name}-system", image=p.image)
    return f"""\
# {p.name}

A Kubernetes operator made of Helm charts, run by helm-operator {p.version}.

## Layout

- `watches.yaml`: which chart serves which custom resource kind
- `charts/`: the charts; `crds/`: their custom resource definitions; `samples/`: example resources
- `hooks/`: optional day-2 hooks in Python (backups, failover, ...)
- `config/`: how the operator is deployed (namespace `{d.namespace}`); `Dockerfile`: its image

## Next steps

1. Add a kind served by a chart you have:
   `helm-operator create-api --group example.com --version v1 --kind MyApp --chart path/to/chart`
   (it copies the chart to `charts/`, writes the CRD, a sample and the watches.yaml entry).
2. Run it against your current cluster: `kubectl apply -f crds/` then
   `helm-operator run --watches-file watches.yaml`.
3. Regenerate the RBAC from what the charts render and the hooks use (after every new kind or
   chart change): `{RBAC_COMMAND}`
4. Build and deploy: `docker build -t {p.image} .` installs helm-operator {p.version} from PyPI,
   or, to use a build of your own, first put its wheel in `dist/`
   (`pip wheel --no-deps -w dist /path/to/helm-operator-checkout`; the Dockerfile installs
   `dist/helm_operator-{p.version}-*.whl` by its path); push or load the image where the cluster
   pulls from, then `kubectl apply -f crds/ -f config/`.
"""


def files(p: Project) -> dict[str, str]:
    """Every file of the new project, by path relative to its folder."""
    d = deploy.Deploy(name=p.name, namespace=f"{p.name}-system", image=p.image, shards=p.shards, ring=p.ring)
    identity = rbac.Identity(name=d.name, namespace=d.namespace, service_account=d.name)
    out = {
        "watches.yaml": WATCHES,
        "README.md": _readme(p),
        "Dockerfile": HEADER + deploy.dockerfile(deploy.FromPackage(p.version), p.image),
        ".dockerignore": deploy.dockerignore(deploy.FromPackage(p.version)),
        "dist/README.md": (
            "A helm-operator wheel put here (same version as the Dockerfile's HELM_OPERATOR_VERSION) is\n"
            "installed into the image by its path instead of the release on PyPI:\n"
            "  pip wheel --no-deps -w dist /path/to/helm-operator-checkout\n"
        ),
        # What `helm-operator rbac` writes for a project without kinds yet: the same bytes.
        f"config/{deploy.RBAC_FILE}": rbac.render_yaml(
            rbac.manifests(rbac.base_grants(), identity), RBAC_COMMAND
        ),
    }
    out.update({f"config/{name}": text for name, text in deploy.config_files(d, HEADER).items()})
    return out


def plan(p: Project, force: bool = False) -> dict[Path, str]:
    """What :func:`write` would write; refuses (naming them) to overwrite files unless ``force``."""
    check_name(p.name)
    out = {p.directory / rel: text for rel, text in files(p).items()}
    for folder in FOLDERS:  # keep empty folders in git; never needed beside existing content
        path = p.directory / folder
        if not path.is_dir() or not any(path.iterdir()):
            out[path / ".gitkeep"] = ""
    existing = sorted(str(path) for path in out if path.exists())
    if existing and not force:
        raise InitError(
            "refusing to overwrite existing files (pass --force to replace them):\n  " + "\n  ".join(existing)
        )
    return out


def write(p: Project, force: bool = False) -> list[Path]:
    """Create the project; returns the files written."""
    planned = plan(p, force)
    for path, text in planned.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return sorted(planned)
