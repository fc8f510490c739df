"""The multi-platform archive of the real images (`make image-index-check`; no root).

`make image-index` joins the archives of `make image` and `make image-arm64` into
dist/agent-sandbox-controller-<version>-multiarch-oci.tar (hack/image/index.py): its index.json
names one image index, whose digest is dist/image-index.digest; the index lists the amd64 image
(dist/image.digest) and then the arm64 one (dist/image-arm64.digest) with their platforms, and
the archive holds every blob they name, each once, and nothing else. A second join of the same
archives gives the same bytes. (The join's rules on small images: tests/unit/project/
test_oci_index.py.)
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.image.test_image import ROOT, version
from tests.unit.project.scripts import load_script

index = load_script(ROOT / "hack" / "image" / "index.py")

DIST = ROOT / "dist"
ARCHIVE = DIST / f"agent-sandbox-controller-{version()}-multiarch-oci.tar"
INPUTS = {
    "amd64": (DIST / f"agent-sandbox-controller-{version()}-oci.tar", DIST / "image.digest"),
    "arm64": (
        DIST / f"agent-sandbox-controller-{version()}-linux-arm64-oci.tar",
        DIST / "image-arm64.digest",
    ),
}


@pytest.fixture(scope="module")
def blobs() -> dict[str, bytes]:
    assert ARCHIVE.is_file(), f"no {ARCHIVE.relative_to(ROOT)}: run `make image-index`"
    files = index.oci.read_layout(ARCHIVE)
    assert set(files) - {"index.json", "oci-layout"} == {
        name for name in files if name.startswith("blobs/sha256/")
    }
    out = {name.removeprefix("blobs/sha256/"): data for name, data in files.items()}
    del out["oci-layout"]
    return out


def image_index(blobs: dict[str, bytes]) -> tuple[dict[str, Any], dict[str, Any]]:
    (desc,) = json.loads(blobs["index.json"])["manifests"]
    return desc, json.loads(blobs[desc["digest"][7:]])


def test_the_index_lists_both_images_by_their_digests_amd64_first(blobs: dict[str, bytes]) -> None:
    desc, idx = image_index(blobs)
    assert (DIST / "image-index.digest").read_text().strip() == desc["digest"]
    assert desc["mediaType"] == idx["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert desc["annotations"] == {"org.opencontainers.image.ref.name": version()}
    assert idx["annotations"]["org.opencontainers.image.version"] == version()
    listed = [(m["platform"], m["digest"]) for m in idx["manifests"]]
    assert listed == [
        ({"architecture": "amd64", "os": "linux"}, INPUTS["amd64"][1].read_text().strip()),
        (
            {"architecture": "arm64", "os": "linux", "variant": "v8"},
            INPUTS["arm64"][1].read_text().strip(),
        ),
    ]


def test_every_blob_is_named_by_the_index_and_hashes_to_its_name(blobs: dict[str, bytes]) -> None:
    desc, idx = image_index(blobs)
    named = {desc["digest"][7:]}
    for m in idx["manifests"]:
        manifest = json.loads(blobs[m["digest"][7:]])
        config = json.loads(blobs[manifest["config"]["digest"][7:]])
        assert (config["os"], config["architecture"]) == ("linux", m["platform"]["architecture"])
        for d in (m, manifest["config"], *manifest["layers"]):
            named.add(d["digest"][7:])
            assert len(blobs[d["digest"][7:]]) == d["size"]
    assert named == set(blobs) - {"index.json"}
    for name in named:
        assert hashlib.sha256(blobs[name]).hexdigest() == name


def test_a_second_join_gives_the_same_bytes(tmp_path: Path) -> None:
    again = index.write_index(
        {arch: archive for arch, (archive, _) in INPUTS.items()}, tmp_path / "m.tar"
    )
    assert again.archive.read_bytes() == ARCHIVE.read_bytes()
    assert f"{again.digest}\n" == (DIST / "image-index.digest").read_text()
