"""hack/image/index.py: per-architecture image layout archives (written by oci.py from small
trees) joined into one multi-platform image index, reproducibly, and only when each input is one
image of the architecture it is given as. (The real archives: tests/image/test_image_index.py,
`make image-index-check`.)"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.unit.project.scripts import load_script

ROOT = Path(__file__).resolve().parents[3]
IMAGE = ROOT / "hack" / "image"

oci = load_script(IMAGE / "oci.py")
index = load_script(IMAGE / "index.py")

REF = "org.opencontainers.image.ref.name"
LABELS = (("org.opencontainers.image.version", "1.0"), ("org.opencontainers.image.title", "t"))


def make_tree(root: Path, arch: str) -> Path:
    """A tiny root filesystem; ``arch`` goes into a file, so each architecture's layer differs."""
    files = {"usr/bin/app": b"#!/usr/bin/python3\n", "etc/arch": arch.encode()}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def single(
    tmp: Path, arch: str, *, tree_arch: str | None = None, ref: str = "1.0", config_arch: str = ""
) -> Any:
    """A one-image archive from oci.py, as ``make image`` and ``make image-arm64`` write them."""
    tag = f"{arch}-{ref}-{tree_arch}-{config_arch}"
    tree = make_tree(tmp / f"tree-{tag}", tree_arch or arch)
    config = oci.ImageConfig(
        entrypoint=("/usr/bin/app",), labels=LABELS, architecture=config_arch or arch
    )
    return oci.write_image(tree, config, tmp / f"{tag}.tar", tmp / f"work-{tag}", ref_name=ref)


@pytest.fixture
def images(tmp_path: Path) -> dict[str, Any]:
    return {arch: single(tmp_path, arch) for arch in ("amd64", "arm64")}


def join(tmp: Path, images: dict[str, Any], name: str = "multi.tar") -> Any:
    return index.write_index({arch: img.archive for arch, img in images.items()}, tmp / name)


def blobs_of(archive: Path) -> dict[str, bytes]:
    files = oci.read_layout(archive)
    return {k.removeprefix("blobs/sha256/"): v for k, v in files.items() if k.startswith("blobs/")}


def the_index(archive: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """index.json's one descriptor, and the image index it names."""
    (desc,) = json.loads(oci.read_layout(archive)["index.json"])["manifests"]
    return desc, json.loads(blobs_of(archive)[desc["digest"][7:]])


def relayout(src: Path, dst: Path, edit: Callable[[Path], None]) -> Path:
    """``src`` unpacked, changed by ``edit`` and packed again as oci.py packs a layout."""
    layout = dst.with_suffix(".d")
    with tarfile.open(src) as tar:
        tar.extractall(layout, filter="data")
    edit(layout)
    with dst.open("wb") as f:
        oci.write_tree_tar(layout, f)
    return dst


def edit_json(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    doc = json.loads(path.read_bytes())
    change(doc)
    path.write_bytes(oci.canonical_json(doc))


def test_the_index_lists_each_platform_with_its_manifests_digest_amd64_first(
    tmp_path: Path, images: dict[str, Any]
) -> None:
    joined = index.write_index(
        {"arm64": images["arm64"].archive, "amd64": images["amd64"].archive}, tmp_path / "m.tar"
    )
    desc, idx = the_index(joined.archive)
    assert desc["mediaType"] == oci.MEDIA_INDEX == idx["mediaType"]
    assert desc["digest"] == joined.digest
    assert desc["size"] == len(oci.canonical_json(idx))
    assert desc["annotations"] == {REF: "1.0"}  # the version, as on the single archives
    assert idx["schemaVersion"] == 2
    assert [(m["platform"], m["digest"], m["mediaType"]) for m in idx["manifests"]] == [
        (
            {"architecture": "amd64", "os": "linux"},
            images["amd64"].manifest_digest,
            oci.MEDIA_MANIFEST,
        ),
        (
            {"architecture": "arm64", "os": "linux", "variant": "v8"},
            images["arm64"].manifest_digest,
            oci.MEDIA_MANIFEST,
        ),
    ]
    assert joined.manifests == (
        ("amd64", images["amd64"].manifest_digest),
        ("arm64", images["arm64"].manifest_digest),
    )
    assert idx["annotations"] == dict(LABELS)  # what the manifests agree on
    assert all("annotations" not in m for m in idx["manifests"])


def test_every_blob_referenced_is_in_the_archive_and_hashes_to_its_name(
    tmp_path: Path, images: dict[str, Any]
) -> None:
    joined = join(tmp_path, images)
    blobs = blobs_of(joined.archive)
    for name, data in blobs.items():
        assert hashlib.sha256(data).hexdigest() == name
    referenced: set[str] = set()

    def follow(desc: dict[str, Any]) -> bytes:
        name = desc["digest"].removeprefix("sha256:")
        assert name in blobs, desc
        assert len(blobs[name]) == desc["size"], desc
        referenced.add(name)
        return blobs[name]

    desc, _ = the_index(joined.archive)
    for m in json.loads(follow(desc))["manifests"]:
        manifest = json.loads(follow(m))
        config = json.loads(follow(manifest["config"]))
        assert config["architecture"] == m["platform"]["architecture"]
        for layer in manifest["layers"]:
            follow(layer)
    assert referenced == set(blobs)  # and nothing else
    for img in images.values():  # every blob of each input, unchanged
        for name, data in blobs_of(img.archive).items():
            assert blobs[name] == data


def test_a_blob_both_images_share_is_in_the_archive_once(tmp_path: Path) -> None:
    """The same tree for both architectures: one layer blob, two configs, two manifests."""
    images = {arch: single(tmp_path, arch, tree_arch="same") for arch in ("amd64", "arm64")}
    layers = {img.manifest_digest: blobs_of(img.archive) for img in images.values()}
    assert len(set.intersection(*(set(b) for b in layers.values()))) == 1
    joined = join(tmp_path, images)
    with tarfile.open(joined.archive) as tar:
        names = tar.getnames()
    assert len(names) == len(set(names))
    assert len([n for n in names if n.startswith("blobs/sha256/")]) == 1 + 2 + 2 + 1


def test_two_joins_give_the_same_bytes_whatever_the_inputs_order_and_the_umask(
    tmp_path: Path, images: dict[str, Any]
) -> None:
    a = join(tmp_path, images, "a.tar")
    umask = os.umask(0o077)  # the modes in the archive are set, not the umask's
    try:
        b = join(tmp_path, dict(reversed(images.items())), "b.tar")
    finally:
        os.umask(umask)
    assert a.archive.read_bytes() == b.archive.read_bytes()
    assert a.digest == b.digest


def test_the_archive_is_written_as_oci_py_writes_a_layout(
    tmp_path: Path, images: dict[str, Any]
) -> None:
    """Sorted entries, owner 0:0, no names, one fixed time, fixed modes, canonical JSON."""
    joined = join(tmp_path, images)
    with tarfile.open(joined.archive) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names, key=os.fsencode)
    assert names[:2] == ["blobs", "blobs/sha256"] and names[-2:] == ["index.json", "oci-layout"]
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {
        (0, 0, "", "", oci.EPOCH)
    }
    assert {m.mode for m in members if m.isdir()} == {0o755}
    assert {m.mode for m in members if m.isfile()} == {0o644}
    files = oci.read_layout(joined.archive)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    desc, _ = the_index(joined.archive)
    for doc in (files["index.json"], files["blobs/sha256/" + desc["digest"][7:]]):
        assert doc == oci.canonical_json(json.loads(doc))
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".multi.tar")]


def test_an_archive_with_two_manifests_is_refused(tmp_path: Path, images: dict[str, Any]) -> None:
    def twice(layout: Path) -> None:
        edit_json(layout / "index.json", lambda d: d["manifests"].append(d["manifests"][0]))

    bad = relayout(images["amd64"].archive, tmp_path / "two.tar", twice)
    with pytest.raises(index.LayoutError, match=re.escape("index.json lists 2 manifests, not one")):
        index.write_index({"amd64": bad, "arm64": images["arm64"].archive}, tmp_path / "m.tar")
    assert not (tmp_path / "m.tar").exists()


def test_an_archive_given_as_another_architecture_is_refused(
    tmp_path: Path, images: dict[str, Any]
) -> None:
    swapped = {"amd64": images["arm64"].archive, "arm64": images["amd64"].archive}
    with pytest.raises(
        index.LayoutError, match=re.escape("index.json says linux/arm64, not linux/amd64")
    ):
        index.write_index(swapped, tmp_path / "m.tar")
    assert not (tmp_path / "m.tar").exists()


def test_a_config_whose_architecture_is_not_the_platforms_is_refused(tmp_path: Path) -> None:
    """index.json says arm64 but the config (what a runtime checks) says amd64."""
    wrong = single(tmp_path, "arm64", config_arch="amd64")

    def say_arm64(layout: Path) -> None:
        edit_json(
            layout / "index.json",
            lambda d: d["manifests"][0]["platform"].update(architecture="arm64"),
        )

    bad = relayout(wrong.archive, tmp_path / "bad.tar", say_arm64)
    amd64 = single(tmp_path, "amd64").archive
    with pytest.raises(index.LayoutError, match="config's architecture is linux/amd64, not"):
        index.write_index({"amd64": amd64, "arm64": bad}, tmp_path / "m.tar")


def test_a_blob_whose_bytes_do_not_match_its_name_is_refused(
    tmp_path: Path, images: dict[str, Any]
) -> None:
    def corrupt(layout: Path) -> None:
        (manifest_hex,) = [
            m["digest"][7:] for m in json.loads((layout / "index.json").read_bytes())["manifests"]
        ]
        path = layout / "blobs/sha256" / manifest_hex
        path.write_bytes(path.read_bytes().replace(b'"schemaVersion":2', b'"schemaVersion":3'))

    bad = relayout(images["arm64"].archive, tmp_path / "bad.tar", corrupt)
    with pytest.raises(index.LayoutError, match="the blob's bytes hash to sha256:"):
        index.write_index({"amd64": images["amd64"].archive, "arm64": bad}, tmp_path / "m.tar")


def test_a_missing_layer_is_refused(tmp_path: Path, images: dict[str, Any]) -> None:
    def drop_layer(layout: Path) -> None:
        blobs = layout / "blobs/sha256"
        (desc,) = json.loads((layout / "index.json").read_bytes())["manifests"]
        (layer,) = json.loads((blobs / desc["digest"][7:]).read_bytes())["layers"]
        (blobs / layer["digest"][7:]).unlink()

    bad = relayout(images["amd64"].archive, tmp_path / "bad.tar", drop_layer)
    with pytest.raises(index.LayoutError, match=r"layer 0 sha256:[0-9a-f]{64} is not in the"):
        index.write_index({"amd64": bad, "arm64": images["arm64"].archive}, tmp_path / "m.tar")


def test_archives_of_different_versions_are_refused(tmp_path: Path) -> None:
    inputs = {"amd64": single(tmp_path, "amd64").archive}
    inputs["arm64"] = single(tmp_path, "arm64", ref="2.0").archive
    with pytest.raises(index.LayoutError, match=f"{REF} differ: \\['1.0', '2.0'\\]"):
        index.write_index(inputs, tmp_path / "m.tar")


def test_an_architecture_with_no_known_platform_is_refused(
    tmp_path: Path, images: dict[str, Any]
) -> None:
    with pytest.raises(index.LayoutError, match="no platform known for \\['riscv64'\\]"):
        index.write_index({"riscv64": images["amd64"].archive}, tmp_path / "m.tar")


def test_the_command_writes_the_archive_and_the_digest_and_names_a_bad_input(
    tmp_path: Path, images: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    out, digest = tmp_path / "m.tar", tmp_path / "image-index.digest"
    argv = ["--out", str(out), "--digest", str(digest)]
    argv += [f"{arch}={img.archive}" for arch, img in images.items()]
    assert index.main(argv) == 0
    desc, _ = the_index(out)
    assert digest.read_text() == desc["digest"] + "\n"
    assert capsys.readouterr().out == desc["digest"] + "\n"
    wrong = ["--out", str(tmp_path / "n.tar"), f"arm64={images['amd64'].archive}"]
    assert index.main(wrong) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"image-index: {images['amd64'].archive}: index.json says linux/amd64")
