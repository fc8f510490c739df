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


def test_the_dockerfile_builds_the_arm64_image_from_its_root_filesystem() -> None:
    """The arm64 build leaves its root filesystem where the Dockerfile's arm64 command names it,
    and the build context lets it in (``.dockerignore`` admits nothing else)."""
    text = (ROOT / "Dockerfile").read_text()
    assert "--platform linux/arm64 --build-arg ROOTFS=build/image-arm64/rootfs.tar" in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert "!build/image-arm64/rootfs.tar" in ignored
    makefile = (ROOT / "Makefile").read_text()
    assert "IMAGE_WORK_ARM64 ?= build/image-arm64" in makefile
    build_py = (ROOT / "hack/image/build.py").read_text()
    assert 'img.layer_tar.replace(work / "rootfs.tar")' in build_py


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


def test_the_arm64_locks_hold_the_same_packages_for_arm64() -> None:
    """debs-arm64.lock has amd64's package names (arm64 or all builds of them); runtime-arm64.lock
    has amd64's wheels at the same versions, each with its own hash."""
    amd64 = build.TARGETS["amd64"]
    arm64 = build.TARGETS["arm64"]
    assert (amd64.debs_lock, amd64.runtime_lock) == (build.DEBS_LOCK, build.RUNTIME_LOCK)
    debs = {n: (a, sha) for n, _, a, sha in build.read_debs_lock(arm64.debs_lock)}
    debs_amd64 = {n: (a, sha) for n, _, a, sha in build.read_debs_lock(amd64.debs_lock)}
    assert debs.keys() == debs_amd64.keys()
    for name, (arch, sha) in debs.items():
        assert arch == ("all" if debs_amd64[name][0] == "all" else "arm64"), name
        assert (sha == debs_amd64[name][1]) == (arch == "all"), name

    def wheels(lock: Path) -> dict[str, tuple[str, str]]:
        found = re.findall(r"^(\S+)==(\S+) \\\n    --hash=sha256:(\w+)$", lock.read_text(), re.M)
        return {name: (ver, sha) for name, ver, sha in found}

    on_arm64, on_amd64 = wheels(arm64.runtime_lock), wheels(amd64.runtime_lock)
    assert {n: v for n, (v, _) in on_arm64.items()} == {n: v for n, (v, _) in on_amd64.items()}
    assert on_arm64["orjson"][1] != on_amd64["orjson"][1]  # a compiled wheel: its own build
    assert "manylinux aarch64" in arm64.runtime_lock.read_text().splitlines()[0]
    assert all("aarch64" in p for p in arm64.platform_args if p.startswith("--platform="))


def test_arm64_debs_come_through_a_private_apt_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """amd64's apt-get download is the machine's own; arm64's sets the architecture and points
    the lists, the dpkg status and the package cache into the cache, not at the host's."""
    monkeypatch.setenv("AGENTSANDBOX_CACHE", str(tmp_path / "cache"))
    calls: list[list[str]] = []

    def fake_run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        if argv[0] == "apt-get" and "download" in argv:  # as apt-get does: the file in cwd
            name, _, ver = argv[-1].partition("=")
            pkg, arch = name.split(":")
            (Path(kw["cwd"]) / build.deb_filename(pkg, ver, arch)).write_bytes(b"deb")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(build.subprocess, "run", fake_run)
    sha = hashlib.sha256(b"deb").hexdigest()
    build.fetch_debs([("libfoo1", "9", "arm64", sha)], tmp_path / "debs", "arm64")
    (argv,) = calls
    assert argv[0] == "apt-get" and argv[-2:] == ["-q", "libfoo1:arm64=9"]
    opts = dict(o.split("=", 1) for o in argv[1:-3] if o != "-o")
    state = tmp_path / "cache" / "image" / "apt-arm64"
    assert opts["APT::Architecture"] == opts["APT::Architectures"] == "arm64"
    assert opts["Dir::State"] == str(state / "state")
    assert opts["Dir::State::status"] == str(state / "state" / "status")
    assert opts["Dir::Cache"] == str(state / "cache")
    assert build.lock_debs.apt_options("amd64") == []


def test_the_emulator_lock_is_one_amd64_package() -> None:
    (entry,) = build.read_debs_lock(IMAGE / "qemu.lock")
    name, version, arch, sha = entry
    assert (name, arch) == ("qemu-user-static", "amd64")
    assert version and re.fullmatch(r"[0-9a-f]{64}", sha)
