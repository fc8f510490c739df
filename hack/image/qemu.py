"""The build machine's AArch64 emulator for the arm64 image's check (``make image-arm64-check``):
prints the path of ``qemu-aarch64-static``.

Debian's qemu-user-static (amd64, the build machine's own architecture) as hack/image/qemu.lock
locks it (name, version, SHA-256; written by hack/image/lock_debs.py), fetched with ``apt-get
download`` through the machine's configured apt sources and checked as the image's packages are
(hack/image/build.py); its ``usr/bin/qemu-aarch64-static`` alone is unpacked (``dpkg-deb
--fsys-tarfile``) into ``~/.cache/agentsandbox/image/qemu/<version>/``. Nothing is installed on
the host and no binfmt handler is registered: the tests run the emulator by its path, with the
arm64 program as its argument. It is static, so it also runs inside the image's root
filesystem.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import build  # noqa: E402
from lock_debs import QEMU_LOCK, cache_root  # noqa: E402

EMULATOR = "usr/bin/qemu-aarch64-static"


def emulator() -> Path:
    """``qemu-aarch64-static`` unpacked from the locked package (fetched and unpacked once)."""
    lock = build.read_debs_lock(QEMU_LOCK)
    (deb,) = build.fetch_debs(lock, cache_root() / "debs", build.ARCH)
    (_, ver, _, sha) = lock[0]
    out = cache_root() / "qemu" / f"{ver.replace(':', '%3a')}-{sha[:12]}"
    if not (out / EMULATOR).is_file():
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        # the one emulator of the package's many (they are about 370 MB unpacked)
        fsys = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True)
        fsys.check_returncode()
        with tarfile.open(fileobj=io.BytesIO(fsys.stdout)) as tar:
            tar.extract(f"./{EMULATOR}", tmp, filter="data")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return out / EMULATOR


def main() -> int:
    try:
        print(emulator())
    except build.LockGone as err:
        print(f"qemu: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
