"""hack/image/: the OCI writer is reproducible and follows the image spec, the Dockerfile is the
same image, the locks are whole, and a locked Debian version that is gone names the refresh
command. (The real build and its run under chroot: tests/image/, `make image-check`.)"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.unit.project.scripts import load_script

ROOT = Path(__file__).resolve().parents[3]
IMAGE = ROOT / "hack" / "image"


oci = load_script(IMAGE / "oci.py")
build = load_script(IMAGE / "build.py")

CONFIG = oci.ImageConfig(entrypoint=("/usr/bin/python3.11", "/usr/bin/app"), env=("A=1",))


def make_tree(root: Path, *, reverse: bool = False, mtime: int = 1_700_000_000) -> Path:
    """A small root filesystem: directories, an executable, a symlink and a hard link."""
    files = {
        "usr/bin/app": b"#!/usr/bin/python3.11\nprint('hi')\n",
        "usr/lib/python3/dist-packages/pkg/__init__.py": b"X = 1\n",
        "etc/passwd": b"nonroot:x:65532:65532::/nonexistent:/usr/sbin/nologin\n",
        "usr/share/a-b": b"sorts before a/",
        "usr/share/a/b": b"inside a",
    }
    for rel in sorted(files, reverse=reverse):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[rel])
    (root / "usr/bin/app").chmod(0o755)
    (root / "usr/bin/python3").symlink_to("python3.11")
    os.link(root / "usr/share/a/b", root / "usr/share/hard")
    for path in [root, *root.rglob("*")]:
        os.utime(path, (mtime, mtime), follow_symlinks=False)
    return root


def write(tmp: Path, tree: Path, tag: str = "v") -> Any:
    return oci.write_image(tree, CONFIG, tmp / f"{tag}.tar", tmp / f"work-{tag}", ref_name="1.0")


def test_the_same_tree_gives_the_same_bytes_whatever_its_times_and_creation_order(
    tmp_path: Path,
) -> None:
    a = write(tmp_path, make_tree(tmp_path / "a"), "a")
    b = write(tmp_path, make_tree(tmp_path / "b", reverse=True, mtime=1_800_000_000), "b")
    assert a.manifest_digest == b.manifest_digest
    assert a.manifest_digest.startswith("sha256:") and len(a.manifest_digest) == 71
    assert a.archive.read_bytes() == b.archive.read_bytes()


def test_a_changed_byte_or_mode_changes_the_digest(tmp_path: Path) -> None:
    base = write(tmp_path, make_tree(tmp_path / "a"), "a")
    tree = make_tree(tmp_path / "b")
    (tree / "etc/passwd").write_bytes(b"nonroot:x:65533:65533::/nonexistent:/usr/sbin/nologin\n")
    assert write(tmp_path, tree, "b").manifest_digest != base.manifest_digest
    tree = make_tree(tmp_path / "c")
    (tree / "usr/bin/app").chmod(0o700)
    assert write(tmp_path, tree, "c").manifest_digest != base.manifest_digest


def test_the_archive_is_an_oci_image_layout(tmp_path: Path) -> None:
    img = write(tmp_path, make_tree(tmp_path / "a"))
    files = oci.read_layout(img.archive)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    blobs = {k.removeprefix("blobs/sha256/"): v for k, v in files.items() if "blobs/" in k}
    for digest, data in blobs.items():  # content addressed
        assert hashlib.sha256(data).hexdigest() == digest
    index = json.loads(files["index.json"])
    assert index["schemaVersion"] == 2 and index["mediaType"] == oci.MEDIA_INDEX
    (desc,) = index["manifests"]
    assert desc["digest"] == img.manifest_digest
    assert desc["platform"] == {"architecture": "amd64", "os": "linux"}
    assert desc["annotations"]["org.opencontainers.image.ref.name"] == "1.0"
    manifest = json.loads(blobs[desc["digest"][7:]])
    assert desc["size"] == len(blobs[desc["digest"][7:]])
    assert manifest["mediaType"] == oci.MEDIA_MANIFEST
    config = json.loads(blobs[manifest["config"]["digest"][7:]])
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == oci.MEDIA_LAYER
    blob = blobs[layer["digest"][7:]]
    assert layer["size"] == len(blob)
    # gzip header: no file name flag, zero time
    assert blob[:2] == b"\x1f\x8b" and blob[3] & 0x08 == 0 and blob[4:8] == b"\0\0\0\0"
    raw = gzip.decompress(blob)
    assert config["rootfs"] == {
        "type": "layers",
        "diff_ids": [f"sha256:{hashlib.sha256(raw).hexdigest()}"],
    }
    assert config["architecture"] == "amd64" and config["os"] == "linux"
    assert config["config"]["User"] == "65532:65532"
    assert config["config"]["Entrypoint"] == ["/usr/bin/python3.11", "/usr/bin/app"]
    assert config["config"]["Env"] == ["A=1"]


def test_the_layer_is_sorted_with_fixed_owner_and_time(tmp_path: Path) -> None:
    img = write(tmp_path, make_tree(tmp_path / "a"))
    with tarfile.open(img.layer_tar) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names, key=os.fsencode)
    assert names.index("usr/share/a-b") < names.index("usr/share/a/b")
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {
        (0, 0, "", "", oci.EPOCH)
    }
    by_name = {m.name: m for m in members}
    assert by_name["usr/bin/app"].mode == 0o755
    assert by_name["usr/bin/python3"].issym() and by_name["usr/bin/python3"].linkname == (
        "python3.11"
    )
    hard = by_name["usr/share/hard"]
    assert hard.islnk() and hard.linkname == "usr/share/a/b"


def test_the_dockerfile_is_the_same_image() -> None:
    """FROM scratch, the build's root filesystem added, and the OCI config's entrypoint, user,
    environment and ports: one recipe."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert [ln for ln in lines if ln.startswith("FROM ")] == ["FROM scratch"]
    assert "ARG ROOTFS=build/image/rootfs.tar" in lines
    assert [ln for ln in lines if ln.startswith(("ADD", "COPY", "RUN"))] == ["ADD ${ROOTFS} /"]
    cfg = build.image_config("0.0.0")
    (entry,) = [ln for ln in lines if ln.startswith("ENTRYPOINT ")]
    assert json.loads(entry.removeprefix("ENTRYPOINT ")) == list(cfg.entrypoint)
    assert f"USER {cfg.user}" in lines
    (env,) = [ln for ln in lines if ln.startswith("ENV ")]
    assert env.removeprefix("ENV ").split() == list(cfg.env)
    assert f"EXPOSE {' '.join(map(str, cfg.ports))}" in lines
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert "*" in ignored and "!build/image/rootfs.tar" in ignored


def test_the_debian_lock_is_whole_and_has_no_shell() -> None:
    entries = build.read_debs_lock(build.DEBS_LOCK)
    assert entries, "hack/image/debs.lock is empty"
    names = {name for name, *_ in entries}
    for name, version, arch, sha in entries:
        assert arch in ("amd64", "all"), name
        assert re.fullmatch(r"[0-9a-f]{64}", sha), name
        assert version, name
    assert {"python3.11-minimal", "libpython3.11-stdlib", "libc6", "libssl3"} <= names
    assert not names & {"bash", "dash", "coreutils", "busybox", "perl-base", "debconf"}


def _runtime_requirements() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + project.get("optional-dependencies", {}).get(
        "tracing", []
    )
    return {canonicalize_name(Requirement(r).name) for r in reqs}


def test_the_runtime_lock_hash_locks_every_runtime_dependency() -> None:
    text = build.RUNTIME_LOCK.read_text()
    entries = re.findall(
        r"^([A-Za-z0-9._-]+)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]{64}\n)+)", text, re.M
    )
    body = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert len(body) == 2 * len(entries), "every requirement has exactly one --hash line"
    locked = {canonicalize_name(name) for name, _, _ in entries}
    missing = _runtime_requirements() - locked
    assert not missing, f"not in runtime.lock (run hack/image/lock_runtime.py): {missing}"


def test_a_locked_version_that_is_gone_names_the_refresh_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    def fake_run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        if argv[:2] == ["apt-get", "download"]:
            return subprocess.CompletedProcess(argv, 100, "", "E: Version '9' was not found\n")
        if argv[:2] == ["apt-cache", "show"]:  # as apt-cache does: exit 0, nothing printed
            return subprocess.CompletedProcess(argv, 0, "", "W: Unable to locate\n")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(build.subprocess, "run", fake_run)
    with pytest.raises(build.LockGone) as err:
        build.fetch_debs([("libfoo1", "9", "amd64", "0" * 64)], tmp_path)
    assert "libfoo1=9" in str(err.value)
    assert str(err.value).endswith("python3 hack/image/lock_debs.py")
    assert ["apt-get", "download", "-q", "libfoo1:amd64=9"] in calls
