"""Build the controller's OCI image without a container engine, from locked inputs (``make image``).

1. The Debian bookworm packages of hack/image/debs.lock, fetched with ``apt-get download`` through
   the machine's configured apt sources into the cache (``~/.cache/agentsandbox/image/debs``) and
   checked against the lock's SHA-256. A locked version the sources no longer have fails the
   build, naming the one command that refreshes the lock.
2. The runtime wheels of hack/image/runtime.lock, fetched by pip with ``--require-hashes`` into
   the cache (``.../image/wheels``), and this repository's own wheel (``python -m build``).
3. The root filesystem: each .deb unpacked with ``dpkg-deb -x`` (no maintainer script runs);
   documentation but the copyright files dropped; the CA bundle assembled as
   update-ca-certificates would; the wheels installed with ``pip --target --no-index``; bytecode
   compiled (hash-checked .pyc: no time stamps); /etc/passwd and /etc/group with the non-root
   user 65532; the controller's command as a Python script.
4. The OCI image (hack/image/oci.py): ``dist/agent-sandbox-controller-<version>-oci.tar`` and
   ``dist/image.digest``; the uncompressed layer is also kept as ``build/image/rootfs.tar`` for
   the Dockerfile (``FROM scratch`` + ``ADD``).

The version is pyproject.toml's; ``VERSION=`` overrides it for one build.

``--arch arm64`` builds the arm64 image instead (``make image-arm64``): the same steps from the
arm64 locks (hack/image/debs-arm64.lock, fetched through a private apt state, see lock_debs.py;
runtime-arm64.lock's manylinux aarch64 wheels), written as a second archive,
``dist/agent-sandbox-controller-<version>-linux-arm64-oci.tar``, with ``dist/image-arm64.digest``.
Nothing of it runs on the build machine but the bytecode compiler (Python's bytecode does not
depend on the machine). amd64 stays the default and its outputs keep their names.
Run with the project's virtualenv (it has ``build`` and ``hatchling``); needs no root, but a
cache without the .debs needs apt to work (as root here).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import lock_debs  # noqa: E402
import lock_runtime  # noqa: E402
import oci  # noqa: E402
from lock_debs import cache_root  # noqa: E402
from lock_runtime import PLATFORM_ARGS, pip_env  # noqa: E402

DEBS_LOCK = lock_debs.LOCKS["amd64"]
RUNTIME_LOCK = lock_runtime.LOCKS["amd64"]
REFRESH_DEBS = "python3 hack/image/lock_debs.py"
ARCH = "amd64"
NAME = "agent-sandbox-controller"
UID = 65532

PYTHON = "/usr/bin/python3.11"
SITE = "usr/lib/python3/dist-packages"  # on Debian's sys.path with no setting
COMMAND = f"/usr/bin/{NAME}"
ENTRYPOINT = (PYTHON, COMMAND)
# unpacked but not kept: manuals, info pages, translations, lintian overrides, and every file
# of /usr/share/doc but the copyright notices
DROP = ("usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian")


@dataclass(frozen=True)
class Target:
    """What differs between the architectures: the locks, pip's platform, the shared libraries'
    directory, and the names of the archive and of its digest file in dist/."""

    arch: str
    debs_lock: Path
    runtime_lock: Path
    platform_args: tuple[str, ...]
    triplet: str  # Debian's multiarch directory
    archive_suffix: str
    digest_name: str
    command: str


TARGETS = {
    "amd64": Target(
        "amd64",
        DEBS_LOCK,
        RUNTIME_LOCK,
        PLATFORM_ARGS,
        "x86_64-linux-gnu",
        "oci.tar",
        "image.digest",
        "make image IMAGE_REPORT=bench/results/image.json",
    ),
    "arm64": Target(
        "arm64",
        lock_debs.LOCKS["arm64"],
        lock_runtime.LOCKS["arm64"],
        lock_runtime.PLATFORM_ARGS_ARM64,
        "aarch64-linux-gnu",
        "linux-arm64-oci.tar",
        "image-arm64.digest",
        "make image-arm64 IMAGE_REPORT=bench/results/image-arm64.json",
    ),
}


def log(msg: str) -> None:
    print(f"image: {msg}", file=sys.stderr, flush=True)


def version(pyproject: Path) -> str:
    override = os.environ.get("VERSION", "").strip()
    if override:
        return override
    return str(tomllib.loads(pyproject.read_text())["project"]["version"])


# ------------------------------------------------------------------------------------ debs
def read_debs_lock(path: Path) -> list[tuple[str, str, str, str]]:
    """(name, version, architecture, sha256) of each locked package."""
    out = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, ver, arch, sha = line.split()
            out.append((name, ver, arch, sha))
    return out


def deb_filename(name: str, ver: str, arch: str) -> str:
    """apt-get download's file name (an epoch's colon written %3a)."""
    return f"{name}_{ver.replace(':', '%3a')}_{arch}.deb"


class LockGone(Exception):
    pass


def fetch_debs(lock: list[tuple[str, str, str, str]], cache: Path, arch: str = ARCH) -> list[Path]:
    cache.mkdir(parents=True, exist_ok=True)
    missing = [(n, v) for n, v, a, _ in lock if not (cache / deb_filename(n, v, a)).is_file()]
    if missing:
        log(f"apt-get download: {len(missing)} package(s) ({arch})")
        _apt_download(missing, cache, arch)
    paths = []
    for name, ver, arch, sha in lock:
        path = cache / deb_filename(name, ver, arch)
        got = oci.sha256_file(path)
        if got != sha:
            path.unlink()
            raise SystemExit(
                f"image: {path.name}: SHA-256 {got}, the lock says {sha}; the file is removed. "
                f"If the archive really changed it, refresh the lock: {REFRESH_DEBS}"
            )
        paths.append(path)
    return paths


def _known(name: str, ver: str, arch: str) -> bool:
    """Whether the apt sources have this version (apt-cache exits 0 either way, printing nothing
    when they do not)."""
    proc = subprocess.run(
        ["apt-cache", *lock_debs.apt_options(arch), "show", f"{name}:{arch}={ver}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.returncode == 0 and bool(proc.stdout.strip())


def _apt_download(wanted: list[tuple[str, str]], cache: Path, arch: str) -> None:
    opts = lock_debs.apt_options(arch)  # none for amd64: the machine's own apt state

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["apt-get", *opts, "download", "-q", *(f"{n}:{arch}={v}" for n, v in wanted)],
            cwd=cache,
            capture_output=True,
            text=True,
            check=False,
        )

    proc = run()
    if proc.returncode != 0 and "Can't find a source" not in proc.stderr:
        # no package lists yet (a fresh machine): fetch them once, then retry
        subprocess.run(["apt-get", *opts, "update", "-qq"], check=False)
        proc = run()
    if proc.returncode != 0:
        gone = [f"{n}={v}" for n, v in wanted if not _known(n, v, arch)]
        sys.stderr.write(proc.stderr)
        if gone:
            raise LockGone(
                f"locked Debian package version(s) no longer in the apt sources: "
                f"{', '.join(gone)}.\nRefresh the lock with:\n    {REFRESH_DEBS}"
            )
        raise SystemExit("image: apt-get download failed (see above)")


# ------------------------------------------------------------------------------------ wheels
def fetch_wheels(cache: Path, target: Target = TARGETS[ARCH]) -> Path:
    """The runtime lock's wheels in ``cache/<hash of the lock>`` (downloaded once per lock)."""
    key = hashlib.sha256(target.runtime_lock.read_bytes()).hexdigest()[:16]
    out = cache / key
    stamp = out / ".complete"
    if not stamp.is_file():
        log("pip download: the runtime lock's wheels")
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--require-hashes"),
                *(*target.platform_args, "-d", str(out), "-r", str(target.runtime_lock)),
            ],
            check=True,
            env=pip_env(),
        )
        stamp.touch()
    return out


def build_own_wheel(out: Path) -> Path:
    if out.exists():
        shutil.rmtree(out)
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(oci.EPOCH))
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(out), "."],
        cwd=ROOT,
        check=True,
        capture_output=True,
        env=env,
    )
    (wheel,) = out.glob("agentsandbox-*.whl")
    return wheel


# ------------------------------------------------------------------------------------ rootfs
def unpack_debs(debs: list[Path], rootfs: Path) -> None:
    for deb in debs:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(rootfs)], check=True)
    for rel in DROP:
        shutil.rmtree(rootfs / rel, ignore_errors=True)
    doc = rootfs / "usr/share/doc"
    for path in sorted(doc.rglob("*"), reverse=True):
        if path.is_dir() and not path.is_symlink():
            if not any(path.iterdir()):
                path.rmdir()
        elif path.name != "copyright":
            path.unlink()


def ca_bundle(rootfs: Path) -> None:
    """/etc/ssl/certs/ca-certificates.crt as update-ca-certificates makes it: the certificates
    /etc/ca-certificates.conf enables (all of the package's, as shipped), in that file's order."""
    share = rootfs / "usr/share/ca-certificates"
    if not share.is_dir():
        return
    certs = sorted(p.relative_to(share).as_posix() for p in share.rglob("*.crt"))
    bundle = b"".join((share / c).read_bytes().rstrip(b"\n") + b"\n" for c in certs)
    out = rootfs / "etc/ssl/certs"
    out.mkdir(parents=True, exist_ok=True)
    (out / "ca-certificates.crt").write_bytes(bundle)
    (rootfs / "etc/ca-certificates.conf").write_text("".join(f"{c}\n" for c in certs))


def install_wheels(rootfs: Path, wheelhouse: Path, own: Path, image: Target) -> None:
    lock = image.runtime_lock
    target = rootfs / SITE
    target.mkdir(parents=True, exist_ok=True)
    common = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    common += ["--no-compile", "--no-warn-script-location", *image.platform_args]
    common += ["--target", str(target)]
    subprocess.run(
        [*common, "--require-hashes", "--find-links", str(wheelhouse), "-r", str(lock)],
        check=True,
        env=pip_env(),
    )
    # console scripts written for the build's Python, and the wheel's local path: not the image's
    shutil.rmtree(target / "bin", ignore_errors=True)
    subprocess.run([*common, str(own)], check=True, env=pip_env())
    shutil.rmtree(target / "bin", ignore_errors=True)
    for f in target.glob("*.dist-info/direct_url.json"):
        f.unlink()
    for f in target.glob("*.dist-info/RECORD"):
        lines = [ln for ln in f.read_text().splitlines() if "direct_url.json" not in ln]
        f.write_text("".join(f"{ln}\n" for ln in lines))


# never imported: test suites, and kubernetes_asyncio's generated API client (about 20 MB of
# bytecode), which agentsandbox/kube/_kaconfig.py keeps from loading
NO_BYTECODE = r"/(test|tests|idle_test)/|/kubernetes_asyncio/client/(api|models)/"


def compile_bytecode(rootfs: Path) -> None:
    """.pyc for the standard library and the wheels, checked by source hash (no time stamps), so
    that the read-only image imports without compiling. The build's Python is 3.11, as the
    image's, so the bytecode format is the same (checked by the image check's run)."""
    if sys.version_info[:2] != (3, 11):
        raise SystemExit(f"image: build with Python 3.11 (this is {sys.version.split()[0]})")
    dirs = [rootfs / "usr/lib/python3.11", rootfs / SITE]
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", "-x", NO_BYTECODE]
        + ["--invalidation-mode", "checked-hash", "-s", str(rootfs), "-p", "/"]
        + [str(d) for d in dirs],
        check=False,  # a file that does not compile (e.g. lib2to3 test data) is left as source
        stdout=subprocess.DEVNULL,
    )


def users(rootfs: Path) -> None:
    etc = rootfs / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"nonroot:x:{UID}:{UID}:nonroot:/nonexistent:/usr/sbin/nologin\n"
    )
    (etc / "group").write_text(f"root:x:0:\nnonroot:x:{UID}:\n")
    (etc / "nsswitch.conf").write_text("passwd: files\ngroup: files\nhosts: files dns\n")
    tmp = rootfs / "tmp"
    tmp.mkdir(exist_ok=True)
    tmp.chmod(0o1777)


def command(rootfs: Path) -> None:
    path = rootfs / COMMAND.lstrip("/")
    path.write_text(
        f"#!{PYTHON}\n"
        "import sys\n\n"
        "from agentsandbox.cli.controller import main\n\n"
        'if __name__ == "__main__":\n'
        "    sys.exit(main())\n"
    )
    path.chmod(0o755)


def assemble(rootfs: Path, debs: list[Path], wheelhouse: Path, own: Path, target: Target) -> None:
    if rootfs.exists():
        shutil.rmtree(rootfs)
    rootfs.mkdir(parents=True)
    unpack_debs(debs, rootfs)
    ca_bundle(rootfs)
    install_wheels(rootfs, wheelhouse, own, target)
    compile_bytecode(rootfs)
    users(rootfs)
    command(rootfs)
    for p in [rootfs, *rootfs.rglob("*")]:  # no write bit for group or others anywhere
        if not p.is_symlink() and p != rootfs / "tmp":
            p.chmod(p.stat().st_mode & ~0o022)


def _tree_bytes(path: Path) -> int:
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_dir() or p.is_symlink())


def largest(rootfs: Path, triplet: str = "x86_64-linux-gnu", top: int = 10) -> dict[str, float]:
    """The biggest parts of the root filesystem (MB, bytecode included): the standard library,
    the shared libraries and each installed top-level package."""
    parts = [rootfs / "usr/lib/python3.11", rootfs / f"usr/lib/{triplet}"]
    parts += [rootfs / f"lib/{triplet}", rootfs / "usr/bin"]
    parts += [p for p in (rootfs / SITE).iterdir() if not p.name.endswith(".dist-info")]
    sizes = {p.relative_to(rootfs).as_posix(): _tree_bytes(p) for p in parts if p.exists()}
    ranked = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return {name: round(size / 1e6, 1) for name, size in ranked}


def git_state() -> dict[str, object]:
    """The commit the image was built from, and whether the work tree had changes."""

    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results")
    return {"commit": git("rev-parse", "--short", "HEAD") or "unknown", "dirty": bool(status)}


def image_config(ver: str, arch: str = ARCH) -> oci.ImageConfig:
    return oci.ImageConfig(
        entrypoint=ENTRYPOINT,
        user=f"{UID}:{UID}",
        env=("PATH=/usr/bin", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"),
        ports=(8080, 8081),
        labels=(
            ("org.opencontainers.image.title", NAME),
            ("org.opencontainers.image.version", ver),
            ("org.opencontainers.image.licenses", "Apache-2.0"),
        ),
        architecture=arch,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--dist", type=Path, default=ROOT / "dist")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "image")
    ap.add_argument("--report", type=Path, help="also write the size report (JSON) here")
    ap.add_argument("--digest-copy", type=Path, help="also write the manifest digest here")
    ap.add_argument("--arch", choices=sorted(TARGETS), default=ARCH)
    args = ap.parse_args(argv)

    target = TARGETS[args.arch]
    ver = version(ROOT / "pyproject.toml")
    cache = cache_root()
    try:
        debs = fetch_debs(read_debs_lock(target.debs_lock), cache / "debs", target.arch)
    except LockGone as err:
        print(f"image: {err}", file=sys.stderr)
        return 1
    wheelhouse = fetch_wheels(cache / "wheels", target)
    work = args.work
    own = build_own_wheel(work / "wheel")
    rootfs = work / "rootfs"
    assemble(rootfs, debs, wheelhouse, own, target)
    archive = args.dist / f"{NAME}-{ver}-{target.archive_suffix}"
    config = image_config(ver, target.arch)
    img = oci.write_image(rootfs, config, archive, work / "oci", ref_name=ver)
    img.layer_tar.replace(work / "rootfs.tar")
    (args.dist / target.digest_name).write_text(img.manifest_digest + "\n")
    if args.digest_copy:
        args.digest_copy.write_text(img.manifest_digest + "\n")
    report = {
        "command": target.command,
        "machine": git_state(),
        "architecture": target.arch,
        "debian_packages": len(debs),
        "wheels": len(list(wheelhouse.glob("*.whl"))) + 1,
        "compressed_bytes": img.layer_gzip_size,
        "uncompressed_bytes": img.layer_size,
        "oci_archive_bytes": img.archive_size,
        "compressed_mb": round(img.layer_gzip_size / 1e6, 1),
        "uncompressed_mb": round(img.layer_size / 1e6, 1),
        "largest_mb": largest(rootfs, target.triplet),
        "inputs_sha256": {
            target.debs_lock.name: oci.sha256_file(target.debs_lock),
            target.runtime_lock.name: oci.sha256_file(target.runtime_lock),
        },
    }
    (work / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    if args.report:
        args.report.write_text(json.dumps(report, indent=2) + "\n")
    log(
        f"{archive.relative_to(ROOT) if archive.is_relative_to(ROOT) else archive}: "
        f"{img.manifest_digest}, {report['compressed_mb']} MB compressed, "
        f"{report['uncompressed_mb']} MB uncompressed"
    )
    print(img.manifest_digest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
