"""A root filesystem directory as an OCI image (image-spec v1.1: an image layout in one tar).

One layer: the directory as a tar whose entries are sorted by path, with owner 0:0, no user or
group names, and one fixed modification time; compressed with gzip with no name and no time in
its header. The config, the manifest and index.json are JSON with sorted keys and no spaces. So
the same directory gives the same digests, byte for byte (tests/unit/project/test_oci_image.py).

The layout archive holds ``oci-layout``, ``index.json`` and ``blobs/sha256/<digest>``, itself a
tar written the same way; skopeo pushes it as it is (``oci-archive:``), crane once unpacked into
a directory (it reads a file as a docker tarball; tests/registry_push/).

Used by hack/image/build.py; nothing here needs root.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

# 2000-01-01T00:00:00Z: a fixed time for every entry (some tools treat 0 as "unset")
EPOCH = 946684800
CREATED = "2000-01-01T00:00:00Z"

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _paths(root: Path) -> Iterator[str]:
    """Every path under ``root``, relative, in byte order of its POSIX form (a directory comes
    before what it holds)."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for name in dirnames + filenames:
            found.append(name if rel == "." else f"{rel}/{name}")
    yield from sorted(found, key=os.fsencode)


def _normalize(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = EPOCH
    info.mode = stat.S_IMODE(info.mode)
    info.pax_headers = {}
    return info


def write_tree_tar(root: Path, out: BinaryIO) -> None:
    """``root`` as a reproducible tar (hard links inside the tree stay hard links)."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in _paths(root):
            path = root / rel
            info = _normalize(tar.gettarinfo(str(path), arcname=rel))
            if info.isreg():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)


def gzip_file(src: Path, dst: Path) -> None:
    """gzip with no file name and a zero time in its header, so the bytes depend on content only."""
    with (
        src.open("rb") as fin,
        dst.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz,
    ):
        shutil.copyfileobj(fin, gz, 1 << 20)


@dataclass(frozen=True)
class ImageConfig:
    """What the image runs: entrypoint, user, environment, ports, labels."""

    entrypoint: tuple[str, ...]
    user: str = "65532:65532"
    env: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    architecture: str = "amd64"
    working_dir: str = "/"


@dataclass(frozen=True)
class Image:
    manifest_digest: str  # "sha256:..."
    layer_tar: Path  # the uncompressed layer (what `ADD` of a Dockerfile unpacks)
    layer_size: int  # its bytes, uncompressed
    layer_gzip_size: int
    archive: Path
    archive_size: int


def _blob(blobs: Path, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def write_image(
    rootfs: Path, config: ImageConfig, archive: Path, workdir: Path, ref_name: str
) -> Image:
    """Write ``rootfs`` as a one-layer OCI image layout archive at ``archive``; ``workdir`` (made
    empty first) holds the layout and the uncompressed layer afterwards."""
    if workdir.exists():
        shutil.rmtree(workdir)
    layout = workdir / "layout"
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    layer_tar = workdir / "layer.tar"
    with layer_tar.open("wb") as f:
        write_tree_tar(rootfs, f)
    diff_id = sha256_file(layer_tar)
    gz = workdir / "layer.tar.gz"
    gzip_file(layer_tar, gz)
    layer_digest = sha256_file(gz)
    layer_gzip_size = gz.stat().st_size
    gz.rename(blobs / layer_digest)

    cfg: dict[str, Any] = {
        "created": CREATED,
        "architecture": config.architecture,
        "os": "linux",
        "config": {
            "User": config.user,
            "Entrypoint": list(config.entrypoint),
            "Env": list(config.env),
            "WorkingDir": config.working_dir,
            "ExposedPorts": {f"{p}/tcp": {} for p in config.ports},
            "Labels": dict(config.labels),
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created": CREATED, "created_by": "hack/image/build.py"}],
    }
    config_desc = {"mediaType": MEDIA_CONFIG, **_blob(blobs, canonical_json(cfg))}
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": config_desc,
        "layers": [
            {"mediaType": MEDIA_LAYER, "digest": f"sha256:{layer_digest}", "size": layer_gzip_size}
        ],
        "annotations": dict(config.labels),
    }
    manifest_desc = {
        "mediaType": MEDIA_MANIFEST,
        **_blob(blobs, canonical_json(manifest)),
        "platform": {"architecture": config.architecture, "os": "linux"},
        "annotations": {"org.opencontainers.image.ref.name": ref_name},
    }
    index = {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [manifest_desc]}
    (layout / "index.json").write_bytes(canonical_json(index))
    (layout / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))

    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(archive.name + ".tmp")
    with tmp.open("wb") as f:
        write_tree_tar(layout, f)
    tmp.replace(archive)
    return Image(
        manifest_digest=str(manifest_desc["digest"]),
        layer_tar=layer_tar,
        layer_size=layer_tar.stat().st_size,
        layer_gzip_size=layer_gzip_size,
        archive=archive,
        archive_size=archive.stat().st_size,
    )


def read_layout(archive: Path) -> dict[str, bytes]:
    """The archive's files by path (for tests and checks)."""
    out: dict[str, bytes] = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            f = tar.extractfile(member)
            if f is not None:
                out[member.name] = f.read()
    return out


def layer_members(blob: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        return tar.getmembers()
