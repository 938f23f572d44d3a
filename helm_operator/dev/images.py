"""Container images for a local real node, built on this machine without a registry.

A real kubelet node (containerd) needs images, and nothing here may pull from a registry: every
image is built from local inputs (Debian's mirror, the machine's Go, this checkout) into an OCI
image archive that ``ctr -n k8s.io images import`` accepts. Archives are cached under
``$HELM_OPERATOR_TOOLS/images``, each named after a digest of its inputs (the recipe below, the
Go version, the mirror, the sources): unchanged inputs are never rebuilt, changed ones always are.

The simple images are one layer, written here by hand (a layer tar, its config, a manifest, and an
``index.json`` carrying containerd's image-name annotation). The operator's own image is built from
the project's Dockerfile by Debian's ``buildah`` (vfs storage and chroot isolation, both under the
cache), with the Dockerfile's base images made locally under the names it uses.

The pure half (recipes, digests, OCI documents, the apt mirror) is unit-tested; the rest runs
programs (debootstrap, chroot, go, tar, buildah, ctr) and needs root.
``python -m helm_operator.dev.images [NAME ...]`` builds what is missing (``tools/bootstrap images``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from helm_operator.dev.tools import REPO_ROOT, _pinned_versions, tools_dir

PAUSE = "localhost/helm-operator/pause:3.10"
DEBIAN = "localhost/helm-operator/debian:bookworm"
POSTGRES = "localhost/helm-operator/postgres:15"
OPERATOR = "localhost/helm-operator/operator:dev"


def etcd_ref(version: str) -> str:
    return f"localhost/helm-operator/etcd:{version}"


SUITE = "bookworm"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
POSTGRES_ENTRYPOINT = "tools/images/postgres-entrypoint.sh"  # the public image's docker-entrypoint.sh
GO_IMAGE_PATH = f"/go/bin:/usr/local/go/bin:{PATH}"
POSTGRES_PATH = f"/usr/lib/postgresql/15/bin:{PATH}"

# The Dockerfile's base images, made locally (see deploy.GO_IMAGE / deploy.PYTHON_IMAGE).
GO_BASE = "golang:1.26"
PYTHON_BASE = "python:3.11-slim"

MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
NAME_ANNOTATION = "io.containerd.image.name"  # what `ctr images import` names the image after
REF_ANNOTATION = "org.opencontainers.image.ref.name"

# Never in a layer: the runtime mounts its own /dev, /proc and /sys; apt's downloads are waste.
# (/run stays: a Pod's containers see the image's /run, e.g. PostgreSQL's socket directory.)
LAYER_EXCLUDES = (
    "./dev/*",
    "./proc/*",
    "./sys/*",
    "./tmp/*",
    "./var/cache/apt/*",
    "./var/lib/apt/lists/*",
)


class ImageBuildFailed(RuntimeError):
    """A build step failed; the message names the image and its log."""


# ---------------------------------------------------------------------------------------------
# Pure: what each image is made of.


@dataclass(frozen=True)
class RunConfig:
    """The part of an OCI image config a container starts from."""

    env: tuple[str, ...] = (f"PATH={PATH}",)
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    workdir: str = ""
    user: str = ""


@dataclass(frozen=True)
class Recipe:
    """One image: its name, how it is made, and what its archive's name depends on.

    ``kind`` selects the builder: ``pause`` (one static Go binary), ``rootfs`` (the Debian base
    as it is), ``debian`` (on the base, in a chroot: ``prepare``, ``packages`` from Debian,
    ``copies`` of host things by name to paths, then ``script``), ``dockerfile`` (buildah). ``inputs`` are the
    digests of everything else it is made from (versions, sources). Every field goes into
    ``key``, so a changed recipe is a new archive. ``tag_also``: a command run in a ``debian``
    image once built, whose output is a second tag of the same image (as ``postgres:15`` is also
    ``postgres:15.14`` in public registries).
    """

    ref: str
    kind: str
    config: RunConfig = field(default_factory=RunConfig)
    packages: tuple[str, ...] = ()
    copies: tuple[tuple[str, str], ...] = ()
    prepare: str = ""
    script: str = ""
    inputs: tuple[tuple[str, str], ...] = ()
    tag_also: str = ""

    @property
    def key(self) -> str:
        doc = {
            "ref": self.ref,
            "kind": self.kind,
            "config": self.config.__dict__,
            "packages": list(self.packages),
            "copies": [list(c) for c in self.copies],
            "prepare": self.prepare,
            "script": self.script,
            "inputs": [list(i) for i in self.inputs],
            "tag_also": self.tag_also,
        }
        return digest_of(doc)


def rootfs_key(mirror: str) -> str:
    """The Debian base's inputs: what debootstrap gets and what a layer leaves out."""
    return digest_of({"suite": SUITE, "variant": "minbase", "mirror": mirror, "excludes": LAYER_EXCLUDES})


def digest_of(doc: Any) -> str:
    """sha256 of a JSON document in canonical form (sorted keys, no whitespace)."""
    data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(data).hexdigest()


def archive_name(ref: str, key: str) -> str:
    """``localhost/helm-operator/postgres:15`` → ``postgres-15-<key12>.tar``."""
    repo, _, tag = ref.rpartition(":")
    base = repo.rsplit("/", 1)[-1]
    return f"{base}-{re.sub(r'[^A-Za-z0-9._-]', '_', tag)}-{key[:12]}.tar"


def apt_mirror(sources: Mapping[str, str], suite: str = SUITE) -> str:
    """The Debian mirror apt uses for ``suite``, from the texts of sources.list files by name.

    Both formats: one-line (``deb URI SUITE COMPONENTS``, ``sources.list``, ``*.list``) and deb822
    (``*.sources`` stanzas with ``Types``/``URIs``/``Suites``). Disabled stanzas (``Enabled: no``)
    and ``deb-src`` entries are skipped; the first match in file-name order wins.
    """
    for name in sorted(sources):
        text = sources[name]
        if name.endswith(".sources"):
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line or line[:1].isspace():
                        continue
                    k, _, v = line.partition(":")
                    fields[k.strip().lower()] = v.strip()
                if fields.get("enabled", "yes").lower() == "no":
                    continue
                if (
                    "deb" not in fields.get("types", "").split()
                    or suite not in fields.get("suites", "").split()
                ):
                    continue
                uris = fields.get("uris", "").split()
                if uris:
                    return uris[0]
        else:
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                    return words[1]
    raise ValueError(f"no apt source for Debian {suite!r} (read {', '.join(sorted(sources)) or 'nothing'})")


def context_paths(dockerignore: str) -> list[str]:
    """The paths an allow-list ``.dockerignore`` (``*`` then ``!path`` lines) lets into the context."""
    return sorted(
        {line[1:].strip().rstrip("/") for line in dockerignore.splitlines() if line.startswith("!")}
    )


def tree_digest(root: Path, paths: Iterable[str]) -> str:
    """sha256 over the named files and directories under ``root``: relative paths, modes and
    contents, in sorted order (``__pycache__``, ``*.pyc`` left out, as the build context does)."""
    h = hashlib.sha256()
    files: list[Path] = []
    for p in paths:
        top = root / p
        if top.is_dir():
            files += [
                f
                for f in top.rglob("*")
                if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc"
            ]
        elif top.is_file():
            files.append(top)
        else:
            h.update(f"missing {p}\0".encode())
    for f in sorted(set(files)):
        rel = f.relative_to(root).as_posix()
        h.update(f"{rel}\0{f.stat().st_mode & 0o111:o}\0".encode())
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def descriptor(media_type: str, digest: str, size: int, **extra: Any) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": size, **extra}


def image_config(diff_id: str, config: RunConfig, created: str, arch: str = "amd64") -> dict[str, Any]:
    """The OCI image config of a one-layer image (``diff_id``: sha256 of the uncompressed layer)."""
    run: dict[str, Any] = {"Env": list(config.env)}
    if config.entrypoint:
        run["Entrypoint"] = list(config.entrypoint)
    if config.cmd:
        run["Cmd"] = list(config.cmd)
    if config.workdir:
        run["WorkingDir"] = config.workdir
    if config.user:
        run["User"] = config.user
    return {
        "created": created,
        "architecture": arch,
        "os": "linux",
        "config": run,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created": created, "created_by": "helm_operator.dev.images"}],
    }


def image_manifest(config: Mapping[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    return {"schemaVersion": 2, "mediaType": MEDIA_MANIFEST, "config": dict(config), "layers": [dict(layer)]}


def image_index(
    manifest: Mapping[str, Any], ref: str, arch: str = "amd64", also: Sequence[str] = ()
) -> dict[str, Any]:
    """The layout's ``index.json``: one manifest, named for containerd and for OCI tools (once
    more for each name in ``also``: containerd imports one image per name)."""
    return {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [named(manifest, r, arch) for r in (ref, *also)],
    }


def names(archive: Path) -> list[str]:
    """The image names an archive's ``index.json`` gives containerd."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        index = json.loads(member.read()) if member is not None else {}
    return [str(m.get("annotations", {}).get(NAME_ANNOTATION)) for m in index.get("manifests", [])]


def named(manifest: Mapping[str, Any], ref: str, arch: str = "amd64") -> dict[str, Any]:
    """A manifest descriptor carrying ``ref`` both as containerd's name and as the OCI ref name."""
    annotations = dict(manifest.get("annotations") or {})
    annotations[NAME_ANNOTATION] = ref
    annotations[REF_ANNOTATION] = ref.rpartition(":")[2]
    return {**manifest, "platform": {"architecture": arch, "os": "linux"}, "annotations": annotations}


def recipes(
    *,
    mirror: str,
    go_version: str,
    etcd_versions: Sequence[str],
    pause_source: str,
    postgres_entrypoint: str,
    operator_sources: str,
) -> dict[str, Recipe]:
    """Every image by name. Inputs are digests of what each is made of, so that its key changes
    exactly when the image would."""
    rootfs = (("rootfs", rootfs_key(mirror)),)
    go_base = Recipe(
        f"localhost/helm-operator/base-{GO_BASE}",
        "debian",
        RunConfig(env=(f"PATH={GO_IMAGE_PATH}", "GOPATH=/go", "GOTOOLCHAIN=local"), workdir="/go"),
        packages=("ca-certificates", "git"),
        copies=(("goroot", "/usr/local/go"),),
        script="mkdir -p /go/bin && /usr/local/go/bin/go version",
        inputs=(*rootfs, ("go", go_version)),
    )
    python_base = Recipe(
        f"localhost/helm-operator/base-{PYTHON_BASE}",
        "debian",
        RunConfig(env=(f"PATH={PATH}", "LANG=C.UTF-8"), cmd=("python3",)),
        packages=("ca-certificates", "python3", "python3-pip"),
        # As the python image has it: `python` and `pip` on PATH, pip free to install (PEP 668's
        # marker refuses outside a venv; here the image is the environment).
        script="ln -sf /usr/bin/python3 /usr/local/bin/python && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED"
        " && python --version && pip --version",
        inputs=rootfs,
    )
    out = [
        Recipe(
            PAUSE,
            "pause",
            RunConfig(env=(), entrypoint=("/pause",)),
            inputs=(("source", pause_source), ("go", go_version)),
        ),
        Recipe(DEBIAN, "rootfs", RunConfig(cmd=("/bin/bash",)), inputs=rootfs),
        Recipe(
            POSTGRES,
            "debian",
            # The public postgres image's contract, which charts rely on: user postgres with uid and
            # gid 999, PGDATA, gosu, and docker-entrypoint.sh (initdb from POSTGRES_* variables).
            RunConfig(
                env=(f"PATH={POSTGRES_PATH}", "LANG=C.UTF-8", "PGDATA=/var/lib/postgresql/data"),
                entrypoint=("docker-entrypoint.sh",),
                cmd=("postgres",),
            ),
            packages=("postgresql-15", "postgresql-client-15", "gosu"),
            # The user before the package (which would pick its own ids); no cluster made at install
            # time: the entrypoint runs initdb where PGDATA says.
            prepare="groupadd -r -g 999 postgres"
            " && useradd -r -g postgres -u 999 -d /var/lib/postgresql -s /bin/bash postgres"
            " && install -d -o postgres -g postgres /var/lib/postgresql"
            " && mkdir -p /etc/postgresql-common/createcluster.d"
            " && echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/image.conf",
            copies=((f"repo:{POSTGRES_ENTRYPOINT}", "/usr/local/bin/docker-entrypoint.sh"),),
            # The socket directory the tools default to (the package makes it at boot only).
            script="install -d -m 2775 -o postgres -g postgres /run/postgresql"
            " && install -d -m 0755 /docker-entrypoint-initdb.d"
            ' && [ "$(id -u postgres):$(id -g postgres)" = 999:999 ]'
            " && postgres --version && gosu postgres true && docker-entrypoint.sh true",
            inputs=(*rootfs, ("entrypoint", postgres_entrypoint)),
            # Also tagged with its exact version (15.14): a version change of the sample from "15"
            # to that restarts every instance on the same binary, which proves the order of a
            # minor upgrade (Debian ships one PostgreSQL 15).
            tag_also="postgres --version | sed -nE 's/^postgres \\(PostgreSQL\\) ([0-9]+\\.[0-9]+).*/\\1/p'",
        ),
        # One etcd image per pinned version: the control plane's, and the one the EtcdCluster
        # sample upgrades to (a real member-by-member version change needs two real etcds).
        *(
            Recipe(
                etcd_ref(version),
                "debian",
                RunConfig(cmd=("etcd",)),
                copies=((f"etcd-binaries:{version}", "/usr/local/bin/"),),
                script="etcd --version && etcdctl version && etcdutl version",
                inputs=(*rootfs, ("etcd", version)),
            )
            for version in etcd_versions
        ),
        go_base,
        python_base,
        Recipe(
            OPERATOR,
            "dockerfile",
            inputs=(("sources", operator_sources), (GO_BASE, go_base.key), (PYTHON_BASE, python_base.key)),
        ),
    ]
    return {r.ref: r for r in out}


# ---------------------------------------------------------------------------------------------
# I/O: writing archives.


def _sha256_file(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest(), path.stat().st_size


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def _add_file(tar: tarfile.TarFile, name: str, path: Path) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = path.stat().st_size, 0o644, 0
    with path.open("rb") as f:
        tar.addfile(info, f)


def write_archive(layer: Path, config: RunConfig, ref: str, out: Path, also: Sequence[str] = ()) -> None:
    """A one-layer OCI image archive (the layer uncompressed: nothing to inflate at import),
    named ``ref`` and each of ``also``."""
    diff_id, size = _sha256_file(layer)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cfg = json.dumps(image_config(diff_id, config, created), sort_keys=True).encode()
    cfg_desc = descriptor(MEDIA_CONFIG, hashlib.sha256(cfg).hexdigest(), len(cfg))
    manifest = json.dumps(
        image_manifest(cfg_desc, descriptor(MEDIA_LAYER, diff_id, size)), sort_keys=True
    ).encode()
    index = image_index(
        descriptor(MEDIA_MANIFEST, hashlib.sha256(manifest).hexdigest(), len(manifest)), ref, also=also
    )
    partial = out.with_name(out.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        _add_bytes(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add_bytes(tar, "index.json", json.dumps(index, sort_keys=True).encode())
        tar.addfile(_dir_info("blobs"))
        tar.addfile(_dir_info("blobs/sha256"))
        _add_bytes(tar, f"blobs/sha256/{hashlib.sha256(cfg).hexdigest()}", cfg)
        _add_bytes(tar, f"blobs/sha256/{hashlib.sha256(manifest).hexdigest()}", manifest)
        _add_file(tar, f"blobs/sha256/{diff_id}", layer)
    partial.rename(out)


def write_layout_archive(layout: Path, ref: str, out: Path) -> None:
    """Tar an OCI layout directory (as ``buildah push oci:DIR`` leaves it), naming its one manifest
    ``ref`` for containerd."""
    index = json.loads((layout / "index.json").read_text())
    if len(index.get("manifests", [])) != 1:
        raise ImageBuildFailed(
            f"{layout}/index.json: expected one manifest, found {len(index.get('manifests', []))}"
        )
    index["manifests"] = [named(index["manifests"][0], ref)]
    partial = out.with_name(out.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        _add_bytes(tar, "oci-layout", (layout / "oci-layout").read_bytes())
        _add_bytes(tar, "index.json", json.dumps(index, sort_keys=True).encode())
        tar.addfile(_dir_info("blobs"))
        tar.addfile(_dir_info("blobs/sha256"))
        for blob in sorted((layout / "blobs" / "sha256").iterdir()):
            _add_file(tar, f"blobs/sha256/{blob.name}", blob)
    partial.rename(out)


def _dir_info(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
    return info


# ---------------------------------------------------------------------------------------------
# I/O: building.


@dataclass
class Builder:
    """Builds archives into ``cache``; each image's programs write to ``logs/images-<name>.log``."""

    cache: Path
    logs: Path
    repo: Path = REPO_ROOT
    progress: Callable[[str], None] = print
    etcd_versions: tuple[str, ...] = ()
    tools: Path = Path()  # where the bootstrap put each etcd version's server binary
    _recipes: dict[str, Recipe] = field(default_factory=dict)
    _log: IO[str] | None = None

    # -- the plan

    def plan(self) -> dict[str, Recipe]:
        if not self._recipes:
            self._recipes = recipes(
                mirror=self.mirror(),
                go_version=_run_out(["go", "version"]).strip(),
                etcd_versions=self.etcd_versions,
                pause_source=tree_digest(self.repo, ["tools/pause"]),
                postgres_entrypoint=tree_digest(self.repo, [POSTGRES_ENTRYPOINT]),
                operator_sources=self.operator_sources(),
            )
        return self._recipes

    def mirror(self) -> str:
        texts: dict[str, str] = {}
        main = Path("/etc/apt/sources.list")
        if main.is_file():
            texts["0-sources.list"] = main.read_text()
        d = Path("/etc/apt/sources.list.d")
        if d.is_dir():
            for f in d.iterdir():
                if f.suffix in (".list", ".sources"):
                    texts[f"1-{f.name}"] = f.read_text()
        return apt_mirror(texts)

    def operator_sources(self) -> str:
        ignore = self.repo / ".dockerignore"
        paths = context_paths(ignore.read_text()) if ignore.is_file() else []
        return tree_digest(self.repo, [*paths, "Dockerfile", ".dockerignore"])

    def path_of(self, ref: str) -> Path:
        r = self.plan()[ref]
        return self.cache / archive_name(ref, r.key)

    # -- the driver

    def ensure(self, ref: str) -> Path:
        """The archive of ``ref``, built (with what it needs) when missing; older ones removed."""
        out = self.path_of(ref)
        if out.is_file():
            return out
        recipe = self.plan()[ref]
        short = ref.rsplit("/", 1)[-1]
        log_path = self.logs / f"images-{short.replace(':', '-')}.log"
        self.progress(f"{short}: building (log: {log_path}) ...")
        start = time.monotonic()
        outer = self._log  # a base built for the operator's image has a log of its own
        with log_path.open("w") as log:
            self._log = log
            try:
                getattr(self, "_build_" + recipe.kind.replace("-", "_"))(recipe, out)
            except (subprocess.CalledProcessError, OSError, ImageBuildFailed) as e:
                log.write(f"\n{e}\n")
                log.flush()
                raise ImageBuildFailed(
                    f"{short}: build failed ({e}); the last lines of {log_path}:\n{_tail(log_path)}"
                ) from e
            finally:
                self._log = outer
        for old in self.cache.glob(archive_name(ref, "x" * 12).replace("x" * 12, "*")):
            if old != out:
                old.unlink()
        self.progress(f"{short}: built in {time.monotonic() - start:.0f}s ({_mb(out)}) → {out}")
        return out

    def _run(self, argv: Sequence[str], **kw: Any) -> None:
        assert self._log is not None
        self._log.write(f"$ {' '.join(argv)}\n")
        self._log.flush()
        subprocess.run(
            argv, check=True, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, **kw
        )

    @contextlib.contextmanager
    def _scratch(self, name: str) -> Iterator[Path]:
        (self.cache / "tmp").mkdir(parents=True, exist_ok=True)
        d = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.cache / "tmp"))
        try:
            yield d
        finally:
            _unmount_under(d)
            shutil.rmtree(d, ignore_errors=True)

    # -- the Debian root filesystem (cached as a tarball: debootstrap is the slow step)

    def rootfs(self) -> Path:
        r = self.plan()[DEBIAN]
        tarball = self.cache / f"rootfs-{SUITE}-minbase-{dict(r.inputs)['rootfs'][:12]}.tar"
        if tarball.is_file():
            return tarball
        mirror = self.mirror()
        with self._scratch("debootstrap") as d:
            root = d / "rootfs"
            self._run(["debootstrap", "--variant=minbase", SUITE, str(root), mirror])
            self._tar(root, tarball)
        for old in self.cache.glob(f"rootfs-{SUITE}-minbase-*.tar"):
            if old != tarball:
                old.unlink()
        return tarball

    def _tar(self, root: Path, out: Path) -> None:
        partial = out.with_name(out.name + ".partial")
        excludes = [f"--exclude={e}" for e in LAYER_EXCLUDES]
        self._run(
            [
                "tar",
                "--numeric-owner",
                "--xattrs",
                "--xattrs-include=*",
                "--sort=name",
                *excludes,
                "-C",
                str(root),
                "-cf",
                str(partial),
                ".",
            ]
        )
        partial.rename(out)

    @contextlib.contextmanager
    def _derived(self, recipe: Recipe, out: Path) -> Iterator[Path]:
        """A writable copy of the base rootfs, with what a chroot needs (device nodes, /proc,
        the host's resolver, no service starts); yields its root, then cleans and packs it."""
        name = recipe.ref.rsplit("/", 1)[-1].split(":")[0]
        base = self.rootfs()
        with self._scratch(name) as d:
            root = d / "rootfs"
            root.mkdir()
            self._run(
                [
                    "tar",
                    "--numeric-owner",
                    "--xattrs",
                    "--xattrs-include=*",
                    "-xpf",
                    str(base),
                    "-C",
                    str(root),
                ]
            )
            for node, minor in (("null", 3), ("zero", 5), ("full", 7), ("random", 8), ("urandom", 9)):
                dev = root / "dev" / node
                if not dev.exists():
                    os.mknod(dev, 0o666 | 0o020000, os.makedev(1, minor))
                    os.chmod(dev, 0o666)
            (root / "usr/sbin/policy-rc.d").write_text(
                "#!/bin/sh\n# no service starts while building an image\nexit 101\n"
            )
            os.chmod(root / "usr/sbin/policy-rc.d", 0o755)
            resolv = root / "etc/resolv.conf"
            resolv.unlink(missing_ok=True)
            shutil.copyfile("/etc/resolv.conf", resolv)
            self._run(["mount", "-t", "proc", "proc", str(root / "proc")])
            try:
                yield root
            finally:
                self._run(["umount", str(root / "proc")])
            (root / "usr/sbin/policy-rc.d").unlink()
            resolv.unlink()
            resolv.touch()
            shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
            (root / "var/lib/apt/lists/partial").mkdir(parents=True)
            also: tuple[str, ...] = ()
            if recipe.tag_also:
                tag = self._chroot(root, recipe.tag_also, recipe.config.env, capture=True).strip()
                if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", tag):
                    raise ImageBuildFailed(f"{recipe.ref}: {recipe.tag_also!r} printed {tag!r}, not a tag")
                also = (f"{recipe.ref.rpartition(':')[0]}:{tag}",)
            layer = d / "layer.tar"
            self._tar(root, layer)
            write_archive(layer, recipe.config, recipe.ref, out, also=also)

    def _chroot(self, root: Path, script: str, image_env: Sequence[str] = (), capture: bool = False) -> str:
        """Run ``script`` in ``root`` with the image's own environment (its PATH first); its
        output when ``capture``d (else it goes to the log)."""
        env = {"PATH": PATH, "DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8", "HOME": "/root"}
        env.update(e.partition("=")[::2] for e in image_env)
        argv = ["chroot", str(root), "/bin/sh", "-ec", script]
        if capture:
            done = subprocess.run(argv, env=env, capture_output=True, text=True)
            if self._log is not None:
                self._log.write(f"$ {script}\n{done.stdout}{done.stderr}")
            if done.returncode != 0:
                raise ImageBuildFailed(f"{script!r} exited {done.returncode}: {done.stderr.strip()[-500:]}")
            return done.stdout
        self._run(argv, env=env)
        return ""

    def _apt_install(self, root: Path, packages: Sequence[str]) -> None:
        self._chroot(
            root,
            "apt-get update -q && apt-get install -y -q --no-install-recommends "
            f"{' '.join(packages)} && apt-get clean",
        )

    # -- one builder per kind

    def _build_pause(self, recipe: Recipe, out: Path) -> None:
        with self._scratch("pause") as d:
            exe = d / "pause"
            env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false"}
            self._run(
                ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(exe), "./main.go"],
                cwd=self.repo / "tools/pause",
                env=env,
            )
            layer = d / "layer.tar"
            with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as tar:
                info = tar.gettarinfo(str(exe), "pause")
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mode, info.mtime = 0o755, 0
                with exe.open("rb") as f:
                    tar.addfile(info, f)
            write_archive(layer, recipe.config, recipe.ref, out)

    def _build_rootfs(self, recipe: Recipe, out: Path) -> None:
        write_archive(self.rootfs(), recipe.config, recipe.ref, out)

    def _build_debian(self, recipe: Recipe, out: Path) -> None:
        sources = {name: self._copy_source(name) for name, _ in recipe.copies}
        with self._derived(recipe, out) as root:
            if recipe.prepare:
                self._chroot(root, recipe.prepare, recipe.config.env)
            if recipe.packages:
                self._apt_install(root, recipe.packages)
            for name, dest in recipe.copies:
                for src in sources[name]:
                    target = root / dest.lstrip("/")
                    if dest.endswith("/"):
                        target.mkdir(parents=True, exist_ok=True)
                        target = target / src.name
                    if src.is_dir():
                        shutil.copytree(src, target, symlinks=True)
                    else:
                        shutil.copy2(src, target)
            if recipe.script:
                self._chroot(root, recipe.script, recipe.config.env)

    def _copy_source(self, name: str) -> list[Path]:
        """What a recipe's ``copies`` name on the host (``repo:PATH``: a file of this checkout); each
        is copied to the destination, or into it when that ends with ``/``."""
        if name.startswith("repo:"):
            path = self.repo / name.removeprefix("repo:")
            if not path.exists():
                raise ImageBuildFailed(f"{path} is missing: the image copies it")
            return [path]
        if name == "goroot":
            return [Path(_run_out(["go", "env", "GOROOT"]).strip())]
        if name.startswith("etcd-binaries:"):
            return self.etcd_tools(name.removeprefix("etcd-binaries:"))
        raise ImageBuildFailed(f"no host source named {name!r}")

    def etcd_tools(self, version: str) -> list[Path]:
        """etcd at ``version`` (the bootstrap's ``etcd`` or ``etcd-next`` component) plus etcdctl
        and etcdutl at the same version, built from their Go modules into ``etcd-tools-<version>/``."""
        etcd = self.tools / f"etcd-{version}" / "etcd"
        if not etcd.is_file():
            raise ImageBuildFailed(
                f"etcd {version} missing at {etcd}: run `tools/bootstrap etcd etcd-next` first"
            )
        out = self.cache / f"etcd-tools-{version}"
        if not (out / ".complete").is_file():
            shutil.rmtree(out, ignore_errors=True)
            w = self.cache / "tmp" / "etcd-tools-build"
            shutil.rmtree(w, ignore_errors=True)
            w.mkdir(parents=True)
            (w / "go.mod").write_text(
                "module helm-operator.local/etcd-tools-build\n\ngo 1.26.0\n\n"
                f"require (\n\tgo.etcd.io/etcd/etcdctl/v3 {version}\n"
                f"\tgo.etcd.io/etcd/etcdutl/v3 {version}\n)\n"
            )
            env = {
                **os.environ,
                "CGO_ENABLED": "0",
                "GOTOOLCHAIN": "local",
                "GOFLAGS": "-buildvcs=false -mod=mod",
            }
            for tool in ("etcdctl", "etcdutl"):
                self._run(
                    [
                        "go",
                        "build",
                        "-trimpath",
                        "-ldflags",
                        "-s -w",
                        "-o",
                        str(out / tool),
                        f"go.etcd.io/etcd/{tool}/v3",
                    ],
                    cwd=w,
                    env=env,
                )
            shutil.rmtree(w)
            (out / ".complete").touch()
        return [etcd, out / "etcdctl", out / "etcdutl"]

    # -- the operator's image, from the Dockerfile

    def buildah(self) -> list[str]:
        root = self.cache / "buildah"
        return [
            "buildah",
            "--root",
            str(root / "storage"),
            "--runroot",
            str(root / "run"),
            "--storage-driver",
            "vfs",
        ]

    def _build_dockerfile(self, recipe: Recipe, out: Path) -> None:
        b = self.buildah()
        env = {**os.environ, "TMPDIR": str(self.cache / "tmp"), "BUILDAH_ISOLATION": "chroot"}
        (self.cache / "tmp").mkdir(exist_ok=True)
        # The Dockerfile's FROM names resolve to local images (short names: localhost/ or Docker
        # Hub's library/); each base is tagged with its key too, and older ones are removed.
        for name, base in (
            (GO_BASE, f"localhost/helm-operator/base-{GO_BASE}"),
            (PYTHON_BASE, f"localhost/helm-operator/base-{PYTHON_BASE}"),
        ):
            archive = self.ensure(base)
            repo = base.rpartition(":")[0]
            keyed = f"{repo}:{self.plan()[base].key[:12]}"
            stored = _run_out([*b, "images", "--format", "{{.Name}}:{{.Tag}}"], env=env).split()
            if keyed not in stored:
                self._run([*b, "pull", "-q", f"oci-archive:{archive}"], env=env)
                self._run([*b, "tag", base, keyed, f"localhost/{name}", f"docker.io/library/{name}"], env=env)
                for old in stored:
                    if old.startswith(f"{repo}:") and old not in (keyed, base):
                        self._run([*b, "rmi", old], env=env)
        gomod = _run_out(["go", "env", "GOMODCACHE"]).strip()
        gocache = _run_out(["go", "env", "GOCACHE"]).strip()
        for cache in (gomod, gocache):
            Path(cache).mkdir(parents=True, exist_ok=True)
        with self._scratch("operator") as d:
            # Build steps only (nothing of it lands in the image): the machine's trust store, which
            # may hold the CA of a proxy between it and the Go proxy or PyPI, and the machine's Go
            # module and build caches (same Go, same flags) for the Go stage.
            self._run(
                [*b, "bud", "--isolation", "chroot", "--pull=never", "--layers=false",
                 "-v", "/etc/ssl/certs:/etc/ssl/certs:ro",
                 "-v", f"{gomod}:/go/pkg/mod", "-v", f"{gocache}:/root/.cache/go-build",
                 "-f", str(self.repo / "Dockerfile"), "-t", recipe.ref, str(self.repo)],
                env=env,
            )  # fmt: skip
            self._run(
                [*b, "push", "-q", "--disable-compression", recipe.ref, f"oci:{d / 'layout'}:{recipe.ref}"],
                env=env,
            )
            self._run([*b, "rmi", recipe.ref], env=env)
            self._run([*b, "rmi", "--prune"], env=env)
            write_layout_archive(d / "layout", recipe.ref, out)


def _unmount_under(d: Path) -> None:
    """Unmount whatever a failed build left mounted below ``d`` (deepest first)."""
    with contextlib.suppress(OSError):
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        for m in sorted((m for m in mounts if m.startswith(f"{d}/")), key=len, reverse=True):
            subprocess.run(["umount", "-l", m], check=False)


def _run_out(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, env=env).stdout


def _tail(path: Path, lines: int = 25) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _mb(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:.0f} MB"


# ---------------------------------------------------------------------------------------------
# The API.


# What each kind of image needs on the machine besides root.
PROGRAMS = {
    "pause": ("go",),
    "rootfs": ("debootstrap", "tar"),
    "debian": ("debootstrap", "tar", "chroot", "mount", "go"),
    "dockerfile": ("debootstrap", "tar", "chroot", "mount", "go", "buildah"),
}


def _builder(progress: Callable[[str], None]) -> Builder:
    tools = tools_dir()
    cache = tools / "images"
    logs = tools / "logs"
    cache.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    return Builder(cache, logs, progress=progress, etcd_versions=etcd_versions(), tools=tools)


def etcd_versions() -> tuple[str, ...]:
    """The pinned etcd versions with an image: the control plane's and the next one up."""
    pins = _pinned_versions()
    return tuple(pins[k] for k in ("ETCD", "ETCD_NEXT") if pins.get(k))


def _check_prerequisites(kinds: Iterable[str]) -> None:
    if os.geteuid() != 0:
        raise ImageBuildFailed("building images needs root (debootstrap, chroot, mount): run as root")
    for prog in sorted({p for k in kinds for p in PROGRAMS[k]}):
        if shutil.which(prog) is None:
            raise ImageBuildFailed(
                f"building images needs {prog} on PATH (tools/bootstrap images installs it)"
            )


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    """One build at a time per cache; what a killed build left (mounts, scratch trees) goes first."""
    with (cache / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        scratch = cache / "tmp"
        if scratch.is_dir():
            _unmount_under(scratch)
            shutil.rmtree(scratch, ignore_errors=True)
        yield


def default_refs() -> list[str]:
    """Every image a real node's Pods use (the Dockerfile's bases are built only for the operator)."""
    return [PAUSE, DEBIAN, POSTGRES, *(etcd_ref(v) for v in etcd_versions()), OPERATOR]


def archives(
    refs: Iterable[str] | None = None, progress: Callable[[str], None] = lambda _: None
) -> dict[str, Path]:
    """The OCI archive of each image by name (default: ``default_refs()``), building what is
    missing; idempotent, cached by inputs, one build at a time per tools directory."""
    b = _builder(progress)
    wanted = list(refs) if refs is not None else default_refs()
    plan = b.plan()
    unknown = [r for r in wanted if r not in plan]
    if unknown:
        raise ImageBuildFailed(f"unknown image(s) {', '.join(unknown)}; known: {', '.join(plan)}")
    missing = [r for r in wanted if not b.path_of(r).is_file()]
    if missing:
        _check_prerequisites(plan[r].kind for r in missing)
    with _locked(b.cache):
        out: dict[str, Path] = {}
        for ref in wanted:
            path = b.path_of(ref)
            if path.is_file():
                progress(f"{ref.rsplit('/', 1)[-1]}: ready ({_mb(path)}) {path}")
            out[ref] = b.ensure(ref)
        return out


def import_into(
    socket: Path | str, paths: Mapping[str, Path], *, ctr: str = "ctr", namespace: str = "k8s.io"
) -> None:
    """Import archives into the containerd at ``socket`` (the CRI's namespace by default), where a
    Pod with ``imagePullPolicy: Never`` or ``IfNotPresent`` finds them by name."""
    for ref, path in paths.items():
        r = subprocess.run(
            [ctr, "--address", str(socket), "-n", namespace, "images", "import", str(path)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise ImageBuildFailed(
                f"ctr images import {path} ({ref}) failed: {r.stderr.strip() or r.stdout.strip()}"
            )


def main(argv: Sequence[str] | None = None) -> int:
    refs = list(sys.argv[1:] if argv is None else argv) or None
    try:
        archives(refs, progress=lambda line: print(f"bootstrap: images: {line}", flush=True))
    except ImageBuildFailed as e:
        print(f"bootstrap: images: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
