"""Per-architecture OCI image layout archives joined into one multi-platform image (``make
image-index``).

Each input is an archive that hack/image/oci.py wrote (``make image``, ``make image-arm64``): an
OCI image layout whose ``index.json`` lists one image manifest for one platform. The output is one
image layout archive whose ``index.json`` names one image index (image-spec v1.1,
``application/vnd.oci.image.index.v1+json``); that index lists each input's manifest with its
platform, amd64 first, whatever the order of the arguments. arm64 is listed as ``linux/arm64``
with the variant ``v8``, the image-spec's value for 64-bit ARM; the image's own config says
``arm64`` and no variant, and a client asking for ``linux/arm64`` gets it (crane's ``--platform
linux/arm64`` does). The manifests are not rewritten, so their digests stay those of the single
archives; every blob of the inputs is in the output once.

The index carries the annotations the manifests agree on (title, version, licenses), and the
``org.opencontainers.image.ref.name`` annotation the inputs carry (the version) moves to the index's
descriptor in ``index.json``. The output is written as oci.py writes a layout: JSON with sorted
keys and no spaces, a tar with sorted entries, owner 0:0, fixed modes and one fixed time; the same
inputs give the same bytes (tests/unit/project/test_oci_index.py).

An input of another shape (more than one manifest, a platform or a config's architecture other than
the one it is given as, a blob whose bytes do not match its name, a missing blob) stops the join
with a message naming the archive. ``skopeo copy --all oci-archive:<out> docker://<ref>`` pushes
the index and both images; crane takes the layout unpacked (``tar -xf``, then ``crane push <dir>
<ref>``). Needs no root.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import oci  # noqa: E402

REF_NAME = "org.opencontainers.image.ref.name"
#: each architecture's platform in the index, in the index's order
PLATFORMS: dict[str, dict[str, str]] = {
    "amd64": {"architecture": "amd64", "os": "linux"},
    "arm64": {"architecture": "arm64", "os": "linux", "variant": "v8"},
}
_BLOB = re.compile(r"blobs/sha256/([0-9a-f]{64})")
_DIRS = {"blobs", "blobs/sha256"}


class LayoutError(ValueError):
    """An input archive is not one single-platform image of the expected architecture."""


@dataclass(frozen=True)
class Part:
    """One input: its manifest's descriptor and what the index takes from it."""

    arch: str
    archive: Path
    manifest: dict[str, Any]  # mediaType, digest, size
    annotations: dict[str, str]  # the manifest's
    ref_name: str | None


@dataclass(frozen=True)
class Index:
    digest: str  # the image index's, "sha256:..."
    manifests: tuple[tuple[str, str], ...]  # (architecture, manifest digest), in the index's order
    archive: Path
    archive_size: int


def _copy_blob(src: Any, blobs: Path, hexdigest: str, where: str) -> None:
    """The member's bytes into ``blobs/<hexdigest>`` (kept once), checked against the name."""
    part = blobs / f"{hexdigest}.part"
    h = hashlib.sha256()
    with part.open("wb") as out:
        for chunk in iter(lambda: src.read(1 << 20), b""):
            h.update(chunk)
            out.write(chunk)
    if h.hexdigest() != hexdigest:
        part.unlink()
        raise LayoutError(f"{where}: the blob's bytes hash to sha256:{h.hexdigest()}")
    part.replace(blobs / hexdigest)


def _json(data: bytes, where: str) -> dict[str, Any]:
    try:
        parsed = json.loads(data)
    except ValueError as err:
        raise LayoutError(f"{where}: not JSON ({err})") from None
    if not isinstance(parsed, dict):
        raise LayoutError(f"{where}: not a JSON object")
    return parsed


def _hex(desc: dict[str, Any], where: str) -> str:
    digest = str(desc.get("digest", ""))
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise LayoutError(f"{where}: not a sha256 digest: {digest!r}")
    return digest[7:]


def _unpack(archive: Path, blobs: Path) -> tuple[dict[str, bytes], set[str]]:
    """``oci-layout`` and ``index.json`` of ``archive`` by name, and the hex digests of its blobs,
    copied into ``blobs``; anything else in it is an error."""
    small: dict[str, bytes] = {}
    own: set[str] = set()
    try:
        with tarfile.open(archive) as tar:
            for member in tar:
                name = member.name.removeprefix("./").rstrip("/")
                where = f"{archive}: {name}"
                blob = _BLOB.fullmatch(name)
                if member.isdir() and name in _DIRS:
                    continue
                if not member.isreg() or not (blob or name in ("oci-layout", "index.json")):
                    raise LayoutError(f"{where}: not a file of an OCI image layout")
                if name in small or (blob and blob[1] in own):
                    raise LayoutError(f"{where}: in the archive twice")
                f = tar.extractfile(member)
                assert f is not None
                if blob:
                    own.add(blob[1])
                    _copy_blob(f, blobs, blob[1], where)
                else:
                    small[name] = f.read()
    except (OSError, tarfile.TarError) as err:
        raise LayoutError(f"{archive}: {err}") from None
    return small, own


def read_part(arch: str, archive: Path, blobs: Path) -> Part:
    """Check ``archive`` is one ``linux/<arch>`` image and copy its blobs into ``blobs``."""
    if arch not in PLATFORMS:
        raise LayoutError(f"{archive}: no platform known for {arch!r} (known: {sorted(PLATFORMS)})")
    small, own = _unpack(archive, blobs)
    if "oci-layout" not in small or "index.json" not in small:
        raise LayoutError(f"{archive}: no oci-layout or no index.json: not an OCI image layout")
    if _json(small["oci-layout"], f"{archive}: oci-layout").get("imageLayoutVersion") != "1.0.0":
        raise LayoutError(f"{archive}: oci-layout is not imageLayoutVersion 1.0.0")

    def blob_json(desc: dict[str, Any], what: str) -> dict[str, Any]:
        hexdigest = _hex(desc, f"{archive}: {what}")
        if hexdigest not in own:
            raise LayoutError(f"{archive}: {what} sha256:{hexdigest} is not in the archive")
        data = (blobs / hexdigest).read_bytes()
        if len(data) != desc.get("size"):
            raise LayoutError(f"{archive}: {what} is {len(data)} bytes, not {desc.get('size')}")
        return _json(data, f"{archive}: {what}")

    manifests = _json(small["index.json"], f"{archive}: index.json").get("manifests", [])
    if len(manifests) != 1:
        raise LayoutError(
            f"{archive}: index.json lists {len(manifests)} manifests, not one image's manifest"
        )
    (desc,) = manifests
    if desc.get("mediaType") != oci.MEDIA_MANIFEST:
        raise LayoutError(f"{archive}: index.json names a {desc.get('mediaType')}, not a manifest")
    platform = desc.get("platform", {})
    if (platform.get("os"), platform.get("architecture")) != ("linux", arch):
        raise LayoutError(
            f"{archive}: index.json says {platform.get('os')}/{platform.get('architecture')}, "
            f"not linux/{arch}"
        )
    manifest = blob_json(desc, "the manifest")
    config = blob_json(manifest.get("config", {}), "the config")
    if (config.get("os"), config.get("architecture")) != ("linux", arch):
        raise LayoutError(
            f"{archive}: the config's architecture is {config.get('os')}/"
            f"{config.get('architecture')}, not linux/{arch}"
        )
    for n, layer in enumerate(manifest.get("layers", [])):
        where = f"layer {n}"
        hexdigest = _hex(layer, f"{archive}: {where}")
        if hexdigest not in own:
            raise LayoutError(f"{archive}: {where} sha256:{hexdigest} is not in the archive")
        if (blobs / hexdigest).stat().st_size != layer.get("size"):
            raise LayoutError(f"{archive}: {where} is not {layer.get('size')} bytes")
    return Part(
        arch=arch,
        archive=archive,
        manifest={k: desc[k] for k in ("mediaType", "digest", "size")},
        annotations=dict(manifest.get("annotations", {})),
        ref_name=desc.get("annotations", {}).get(REF_NAME),
    )


def write_index(inputs: Mapping[str, Path], archive: Path) -> Index:
    """Join ``inputs`` (architecture -> single-platform layout archive) into one image layout
    archive at ``archive`` whose index.json names an image index of all of them."""
    order = list(PLATFORMS)
    unknown = sorted(set(inputs) - set(order))
    if unknown:
        raise LayoutError(f"no platform known for {unknown} (known: {order})")
    if not inputs:
        raise LayoutError("nothing to join")
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=archive.parent, prefix=f".{archive.name}-") as tmp:
        layout = Path(tmp) / "layout"
        blobs = layout / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        parts = [read_part(arch, inputs[arch], blobs) for arch in order if arch in inputs]
        refs = {p.ref_name for p in parts}
        if len(refs) != 1:
            raise LayoutError(f"the archives' {REF_NAME} differ: {sorted(map(str, refs))}")
        (ref_name,) = refs
        shared = dict(set.intersection(*(set(p.annotations.items()) for p in parts)))
        index: dict[str, Any] = {
            "schemaVersion": 2,
            "mediaType": oci.MEDIA_INDEX,
            "manifests": [{**p.manifest, "platform": PLATFORMS[p.arch]} for p in parts],
        }
        if shared:
            index["annotations"] = shared
        data = oci.canonical_json(index)
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        index_desc: dict[str, Any] = {
            "mediaType": oci.MEDIA_INDEX,
            "digest": f"sha256:{digest}",
            "size": len(data),
        }
        if ref_name is not None:
            index_desc["annotations"] = {REF_NAME: ref_name}
        top = {"schemaVersion": 2, "mediaType": oci.MEDIA_INDEX, "manifests": [index_desc]}
        (layout / "index.json").write_bytes(oci.canonical_json(top))
        (layout / "oci-layout").write_bytes(oci.canonical_json({"imageLayoutVersion": "1.0.0"}))
        for path in [*layout.rglob("*")]:  # the modes oci.py's archives have (umask 022)
            path.chmod(0o755 if path.is_dir() else 0o644)
        out = archive.with_name(archive.name + ".tmp")
        with out.open("wb") as f:
            oci.write_tree_tar(layout, f)
        out.replace(archive)
    return Index(
        digest=str(index_desc["digest"]),
        manifests=tuple((p.arch, str(p.manifest["digest"])) for p in parts),
        archive=archive,
        archive_size=archive.stat().st_size,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Join per-architecture OCI image layout archives into one image index."
    )
    ap.add_argument("--out", type=Path, required=True, help="the multi-platform archive to write")
    ap.add_argument("--digest", type=Path, help="also write the index's digest here")
    ap.add_argument("inputs", nargs="+", metavar="ARCH=ARCHIVE", help="e.g. amd64=dist/...-oci.tar")
    args = ap.parse_args(argv)
    inputs: dict[str, Path] = {}
    for item in args.inputs:
        arch, sep, path = item.partition("=")
        if not sep or not path or arch in inputs:
            ap.error(f"{item!r}: give each architecture once, as ARCH=ARCHIVE")
        inputs[arch] = Path(path)
    try:
        idx = write_index(inputs, args.out)
    except LayoutError as err:
        print(f"image-index: {err}", file=sys.stderr)
        return 1
    if args.digest:
        args.digest.write_text(idx.digest + "\n")
    listed = ", ".join(f"{arch} {digest}" for arch, digest in idx.manifests)
    print(f"image-index: {args.out}: {idx.digest} ({listed})", file=sys.stderr, flush=True)
    print(idx.digest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
