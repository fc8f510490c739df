"""The arm64 image is an AArch64 image that runs (`make image-arm64-check`, as root; CI runs as
root).

Its archive (`make image-arm64`) says linux/arm64 in its index and config; the interpreter, the C
library and every compiled extension of its root filesystem are AArch64 ELF files (e_machine
183). Its controller runs through ``qemu-aarch64-static`` (Debian's qemu-user-static, unpacked
into the cache by hack/image/qemu.py; nothing is installed on the host, no binfmt handler is
registered): the emulator, static, is copied into the unpacked tree and run by path under
``chroot`` as UID 65532 on the read-only bind mount, with the config's entrypoint as its
arguments and the config's environment alone. A second build from the same inputs gives the same
digest.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import started_cluster
from tests.image.test_image import ROOT, version
from tests.image_chroot import (
    UID,
    Image,
    blobs,
    build_again,
    controller_ready_in_chroot,
    read_only_rootfs,
    version_in_chroot,
)

ARCHIVE = ROOT / "dist" / f"agent-sandbox-controller-{version()}-linux-arm64-oci.tar"
DIGEST = ROOT / "dist" / "image-arm64.digest"
EM_AARCH64 = 183
EM_X86_64 = 62
#: where the emulator is copied to inside the tree (removed afterwards)
EMULATOR = "/qemu-aarch64-static"


def elf_machine(path: Path) -> int:
    """e_machine of an ELF file (its header's bytes 18-19, in the file's byte order)."""
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF", f"{path} is not an ELF file"
    return int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")


@pytest.fixture(scope="module")
def image() -> Image:
    assert os.geteuid() == 0, "chroot and mount need root (CI runs as root)"
    assert ARCHIVE.is_file(), f"no {ARCHIVE.relative_to(ROOT)}: run `make image-arm64`"
    return blobs(ARCHIVE)


@pytest.fixture(scope="module")
def rootfs(image: Image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with read_only_rootfs(image[2], tmp_path_factory.mktemp("image-arm64")) as ro:
        yield ro


@pytest.fixture(scope="module")
def emulated(image: Image, rootfs: Path) -> Iterator[dict[str, Any]]:
    """The image config with ``qemu-aarch64-static`` (copied into the tree) before its
    entrypoint."""
    qemu = Path(os.environ.get("QEMU_AARCH64", ""))
    assert qemu.is_file(), "QEMU_AARCH64 names no file: run `make image-arm64-check`"
    assert elf_machine(qemu) == EM_X86_64  # the build machine's own
    inside = rootfs.parent / "tree" / EMULATOR.lstrip("/")
    shutil.copyfile(qemu, inside)
    inside.chmod(0o755)
    _, config, _ = image
    entry = [EMULATOR, *config["config"]["Entrypoint"]]
    try:
        yield {**config, "config": {**config["config"], "Entrypoint": entry}}
    finally:
        inside.unlink()


def test_the_index_and_the_config_say_linux_arm64(image: Image) -> None:
    with tarfile.open(ARCHIVE) as tar:
        f = tar.extractfile("index.json")
        assert f is not None
        (desc,) = json.loads(f.read())["manifests"]
    assert desc["platform"] == {"architecture": "arm64", "os": "linux"}
    assert DIGEST.read_text().strip() == desc["digest"]
    _, config, _ = image
    assert (config["architecture"], config["os"]) == ("arm64", "linux")
    assert config["config"]["User"] == f"{UID}:{UID}"


def test_the_interpreter_and_every_compiled_extension_are_aarch64(rootfs: Path) -> None:
    python = rootfs / "usr/bin/python3.11"
    assert elf_machine(python) == EM_AARCH64
    assert elf_machine(rootfs / "lib/aarch64-linux-gnu/libc.so.6") == EM_AARCH64
    assert not (rootfs / "lib/x86_64-linux-gnu").exists()
    site = rootfs / "usr/lib/python3/dist-packages"
    (orjson,) = site.glob("orjson/orjson.cpython-311-aarch64-linux-gnu.so")
    assert elf_machine(orjson) == EM_AARCH64
    extensions = sorted(site.rglob("*.so"))
    assert len(extensions) > 10, extensions
    wrong = [p.relative_to(site) for p in extensions if elf_machine(p) != EM_AARCH64]
    assert not wrong, wrong
    for shell in ("bin/sh", "usr/bin/sh", "bin/bash", "usr/bin/bash", "bin/dash", "usr/bin/dash"):
        assert not os.path.lexists(rootfs / shell), shell


def test_version_runs_through_qemu_under_chroot_as_65532_read_only(
    rootfs: Path, emulated: dict[str, Any]
) -> None:
    with pytest.raises(OSError):  # the bind mount really is read-only
        (rootfs / "probe").write_text("x")
    out = version_in_chroot(rootfs, emulated)
    assert out.startswith("agent-sandbox-controller, version "), out
    assert "python version:   3.11." in out, out


def test_the_controller_becomes_ready_through_qemu(
    rootfs: Path, emulated: dict[str, Any], tmp_path: Path
) -> None:
    """About 12 s here: a private control plane starts, then the emulated controller imports
    its modules and syncs its informers (the wait allows 90 s, for slower emulation)."""
    with started_cluster("agentsandbox-image-arm64-", nodes=1) as cluster:
        controller_ready_in_chroot(rootfs, emulated, cluster, tmp_path / "controller.log")


def test_a_second_build_gives_the_same_digest(tmp_path: Path) -> None:
    """About 12 s here (up to a minute on a busy machine): the whole arm64 build again, from the
    caches `make image-arm64` filled, into a directory of its own."""
    expected = DIGEST.read_text().strip()
    assert build_again(tmp_path, version(), "--arch", "arm64") == expected
    assert (tmp_path / "dist" / ARCHIVE.name).read_bytes() == ARCHIVE.read_bytes()
    assert (tmp_path / "dist" / "image-arm64.digest").read_text().strip() == expected
    assert not (tmp_path / "dist" / "image.digest").exists()  # amd64's is not touched
