"""The pure half of the real node's image builder: recipes and their keys, the OCI documents and
archives containerd imports, the apt mirror, and the operator image's input digest."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from helm_operator.dev import images

REPO = Path(__file__).resolve().parents[2]


def plan(**changed: object) -> dict[str, images.Recipe]:
    args = {
        "mirror": "http://deb.debian.org/debian",
        "go_version": "go version go1.26.8 linux/amd64",
        "etcd_versions": ("v3.6.16", "v3.7.3"),
        "pause_source": "p1",
        "postgres_entrypoint": "e1",
        "operator_sources": "s1",
    }
    return images.recipes(**{**args, **changed})


def keys(**changed: object) -> dict[str, str]:
    return {ref: r.key for ref, r in plan(**changed).items()}


def test_every_image_has_the_name_pods_use() -> None:
    assert set(plan()) >= {
        "localhost/helm-operator/pause:3.10",
        "localhost/helm-operator/debian:bookworm",
        "localhost/helm-operator/postgres:15",
        "localhost/helm-operator/etcd:v3.6.16",
        "localhost/helm-operator/etcd:v3.7.3",
        "localhost/helm-operator/operator:dev",
    }


def test_each_etcd_image_carries_its_own_versions_binaries() -> None:
    for version in ("v3.6.16", "v3.7.3"):
        recipe = plan()[images.etcd_ref(version)]
        assert recipe.copies == ((f"etcd-binaries:{version}", "/usr/local/bin/"),)
        assert ("etcd", version) in recipe.inputs


def test_the_bootstrap_pins_the_etcd_versions_the_images_are_built_for() -> None:
    pinned = images.etcd_versions()
    assert len(pinned) == 2 and pinned[0] != pinned[1], pinned
    assert [images.etcd_ref(v) for v in pinned] == [r for r in images.default_refs() if "/etcd:" in r]


def test_postgres_keeps_the_public_images_contract() -> None:
    pg = plan()[images.POSTGRES]
    env = dict(e.split("=", 1) for e in pg.config.env)
    assert env["PATH"].split(":")[0] == "/usr/lib/postgresql/15/bin"
    assert env["PGDATA"] == "/var/lib/postgresql/data"
    assert {"postgresql-15", "postgresql-client-15", "gosu"} <= set(pg.packages)
    assert "-u 999" in pg.prepare and "-g 999" in pg.prepare  # before the package makes the user
    assert pg.config.entrypoint == ("docker-entrypoint.sh",)
    assert ("repo:tools/images/postgres-entrypoint.sh", "/usr/local/bin/docker-entrypoint.sh") in pg.copies
    assert (REPO / images.POSTGRES_ENTRYPOINT).is_file()


@pytest.mark.parametrize(
    ("change", "rebuilt"),
    [
        ({"operator_sources": "s2"}, {images.OPERATOR}),
        ({"pause_source": "p2"}, {images.PAUSE}),
        ({"postgres_entrypoint": "e2"}, {images.POSTGRES}),
        # Another etcd version is another image; the other version's is kept.
        (
            {"etcd_versions": ("v3.6.15", "v3.7.3")},
            {"localhost/helm-operator/etcd:v3.6.15", "localhost/helm-operator/etcd:v3.6.16"},
        ),
        # The mirror is what every Debian-based image (and so the operator's bases) is made from.
        ({"mirror": "http://mirror.example/debian"}, set(plan()) - {images.PAUSE}),
        # Go builds pause, and the operator's Go stage runs on the machine's toolchain.
        (
            {"go_version": "go version go1.26.9 linux/amd64"},
            {images.PAUSE, images.OPERATOR, f"localhost/helm-operator/base-{images.GO_BASE}"},
        ),
    ],
)
def test_a_key_changes_exactly_when_an_input_of_that_image_does(
    change: dict[str, object], rebuilt: set[str]
) -> None:
    before, after = keys(), keys(**change)
    assert {ref for ref in before.keys() | after.keys() if before.get(ref) != after.get(ref)} == rebuilt


def test_keys_are_stable_and_archive_names_carry_them() -> None:
    assert keys() == keys()
    key = plan()[images.POSTGRES].key
    assert images.archive_name(images.POSTGRES, key) == f"postgres-15-{key[:12]}.tar"
    assert images.archive_name("localhost/helm-operator/etcd:v3.6.16", key).startswith("etcd-v3.6.16-")


DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
"""


@pytest.mark.parametrize(
    ("sources", "mirror"),
    [
        ({"debian.sources": DEB822}, "http://deb.debian.org/debian"),
        (
            {
                "sources.list": "# comment\ndeb-src http://src/ bookworm main\n"
                "deb http://m/debian bookworm main\n"
            },
            "http://m/debian",
        ),
        (
            {"sources.list": "deb [arch=amd64 signed-by=/k.gpg] http://m2/debian bookworm main"},
            "http://m2/debian",
        ),
        # Disabled stanzas and other suites do not count; file order decides between the rest.
        (
            {
                "a.sources": "Enabled: no\nTypes: deb\nURIs: http://off/\nSuites: bookworm\n",
                "b.list": "deb http://sec/ bookworm-security main\ndeb http://on/ bookworm main",
                "c.list": "deb http://later/ bookworm main",
            },
            "http://on/",
        ),
    ],
)
def test_the_mirror_is_the_one_apt_uses(sources: dict[str, str], mirror: str) -> None:
    assert images.apt_mirror(sources) == mirror


def test_no_mirror_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"no apt source for Debian 'bookworm'.*x\.list"):
        images.apt_mirror({"x.list": "deb http://m/ trixie main"})


def test_the_operator_digest_covers_what_the_build_context_admits(tmp_path: Path) -> None:
    ignore = (REPO / ".dockerignore").read_text()
    assert {"pyproject.toml", "helm_operator", "charts", "hooks", "watches.yaml", "README.md"} <= set(
        images.context_paths(ignore)
    )
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("a = 1\n")
    (tmp_path / "other.txt").write_text("not in the context\n")
    first = images.tree_digest(tmp_path, ["pkg"])
    (tmp_path / "other.txt").write_text("changed\n")
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert images.tree_digest(tmp_path, ["pkg"]) == first
    (tmp_path / "pkg" / "a.py").write_text("a = 2\n")
    assert images.tree_digest(tmp_path, ["pkg"]) != first
    (tmp_path / "pkg" / "a.py").write_text("a = 1\n")
    (tmp_path / "pkg" / "a.py").chmod(0o755)  # an executable bit is content too
    assert images.tree_digest(tmp_path, ["pkg"]) != first


def test_a_written_archive_is_a_named_oci_layout_whose_digests_hold(tmp_path: Path) -> None:
    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as t:
        t.add(__file__, "hello")
    out = tmp_path / "image.tar"
    config = images.RunConfig(env=("PATH=/bin",), entrypoint=("/hello",), user="65532")
    images.write_archive(layer, config, "localhost/helm-operator/x:1", out)

    with tarfile.open(out) as t:
        blobs = {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert json.loads(blobs["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(blobs["index.json"])
    (entry,) = index["manifests"]
    assert entry["annotations"][images.NAME_ANNOTATION] == "localhost/helm-operator/x:1"
    assert entry["platform"] == {"architecture": "amd64", "os": "linux"}

    def blob(desc: dict[str, object]) -> bytes:
        data = blobs[f"blobs/sha256/{str(desc['digest']).removeprefix('sha256:')}"]
        assert f"sha256:{hashlib.sha256(data).hexdigest()}" == desc["digest"]
        assert len(data) == desc["size"]
        return data

    manifest = json.loads(blob(entry))
    assert manifest["mediaType"] == entry["mediaType"] == images.MEDIA_MANIFEST
    cfg = json.loads(blob(manifest["config"]))
    (layer_desc,) = manifest["layers"]
    assert blob(layer_desc) == layer.read_bytes()
    assert layer_desc["mediaType"] == images.MEDIA_LAYER
    # Uncompressed: the layer's digest is its diff_id.
    assert cfg["rootfs"]["diff_ids"] == [layer_desc["digest"]]
    assert cfg["config"] == {"Env": ["PATH=/bin"], "Entrypoint": ["/hello"], "User": "65532"}
    assert (cfg["os"], cfg["architecture"]) == ("linux", "amd64")


def test_a_layout_from_another_tool_gets_the_name_containerd_reads(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    (layout / "blobs" / "sha256").mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (layout / "blobs" / "sha256" / "abc").write_text("x")
    desc = {"mediaType": images.MEDIA_MANIFEST, "digest": "sha256:abc", "size": 1}
    (layout / "index.json").write_text(
        json.dumps(
            {"schemaVersion": 2, "manifests": [{**desc, "annotations": {images.REF_ANNOTATION: "dev"}}]}
        )
    )
    out = tmp_path / "out.tar"
    images.write_layout_archive(layout, images.OPERATOR, out)
    with tarfile.open(out) as t:
        assert sorted(t.getnames()) == [
            "blobs",
            "blobs/sha256",
            "blobs/sha256/abc",
            "index.json",
            "oci-layout",
        ]
        index = json.loads(t.extractfile("index.json").read())  # type: ignore[union-attr]
    (entry,) = index["manifests"]
    assert entry["annotations"] == {images.NAME_ANNOTATION: images.OPERATOR, images.REF_ANNOTATION: "dev"}
    assert entry["digest"] == "sha256:abc"


def test_an_image_tagged_also_is_one_manifest_under_two_names(tmp_path: Path) -> None:
    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as t:
        t.add(__file__, "hello")
    out = tmp_path / "image.tar"
    images.write_archive(layer, images.RunConfig(), "localhost/x/pg:15", out, also=("localhost/x/pg:15.14",))
    assert images.names(out) == ["localhost/x/pg:15", "localhost/x/pg:15.14"]
    with tarfile.open(out) as t:
        member = t.extractfile("index.json")
        assert member is not None
        entries = json.loads(member.read())["manifests"]
    assert len({e["digest"] for e in entries}) == 1  # the same image: nothing stored twice
    # The PostgreSQL image says its exact version; a new command is a new archive.
    pg = plan()[images.POSTGRES]
    assert "postgres --version" in pg.tag_also
    assert dataclasses.replace(pg, tag_also="echo 15.99").key != pg.key
