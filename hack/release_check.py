"""``make release-check``: verify a release directory that ``make release`` wrote.

``python hack/release_check.py --dist DIR --version V [--rebuild-image]`` checks, printing one
line per check and exiting 1 if any failed:

- ``SHA256SUMS`` names every other file of DIR exactly once, and each sum matches the file;
- the OCI archive ``agent-sandbox-controller-<V>-oci.tar`` is an image layout with one manifest,
  ``image.digest`` is that manifest's digest, and ``install.yaml``'s controller image is
  ``<repository>:<tag>@<that digest>``;
- the chart ``agent-sandbox-<V>.tgz`` has ``version`` and ``appVersion`` equal to V;
- the wheel and the sdist are named with V's PEP 440 form, and their metadata say that version;
- ``RELEASE.md`` is V's section of CHANGELOG.md (hack/changelog.py);
- with ``--rebuild-image``: the image built again from the same inputs (hack/image/build.py,
  into a temporary directory) gives the same manifest digest.

Each check is a function that takes the files and returns the problems it found (an empty list
when there are none); tests/unit/project/test_release_check.py feeds them broken inputs.
"""

from __future__ import annotations

import argparse
import email
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from changelog import ChangelogError, section  # noqa: E402
from release import CONTAINER, DIGEST, _Loader, image_reference  # noqa: E402
from semver import VersionError, to_pep440  # noqa: E402

IMAGE_NAME = "agent-sandbox-controller"
CHART_NAME = "agent-sandbox"


def archive_name(version: str) -> str:
    return f"{IMAGE_NAME}-{version}-oci.tar"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_sums(dist: Path) -> list[str]:
    """SHA256SUMS covers every other file of ``dist`` once, and every sum is right."""
    sums = dist / "SHA256SUMS"
    if not sums.is_file():
        return ["no SHA256SUMS"]
    problems: list[str] = []
    listed: dict[str, str] = {}
    for n, line in enumerate(sums.read_text().splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or not name:
            problems.append(f"SHA256SUMS line {n} is not '<sha256>  <name>': {line!r}")
            continue
        if name in listed:
            problems.append(f"SHA256SUMS names {name} twice")
        listed[name] = digest
    files = {p.name for p in dist.iterdir() if p.is_file() and p.name != "SHA256SUMS"}
    for name in sorted(files - set(listed)):
        problems.append(f"{name} is not in SHA256SUMS")
    for name in sorted(set(listed) - files):
        problems.append(f"SHA256SUMS names {name}, which is not there")
    for name in sorted(files & set(listed)):
        if _sha256(dist / name) != listed[name]:
            problems.append(f"{name}: its SHA-256 is not the one SHA256SUMS gives")
    return problems


def archive_digest(archive: Path) -> str:
    """The manifest digest of an OCI image layout archive with one image (what a registry
    reports once it is pushed); a ValueError when the archive is not such a layout or a blob
    does not match its digest."""
    with tarfile.open(archive) as tar:

        def read(name: str) -> bytes:
            try:
                f = tar.extractfile(name)
            except KeyError:
                f = None
            if f is None:
                raise ValueError(f"{archive.name} has no {name}")
            return f.read()

        layout = json.loads(read("oci-layout"))
        if layout.get("imageLayoutVersion") != "1.0.0":
            raise ValueError(f"{archive.name}: oci-layout is {layout!r}")
        manifests = json.loads(read("index.json")).get("manifests", [])
        if len(manifests) != 1:
            raise ValueError(f"{archive.name}: index.json has {len(manifests)} manifests, not 1")
        digest = str(manifests[0]["digest"])
        if not DIGEST.match(digest):
            raise ValueError(f"{archive.name}: {digest!r} is not a sha256 digest")
        blob = read(f"blobs/sha256/{digest[7:]}")
        if "sha256:" + hashlib.sha256(blob).hexdigest() != digest:
            raise ValueError(f"{archive.name}: the manifest blob does not match its digest")
        return digest


def _controller_image(manifest: str) -> str:
    docs = [d for d in yaml.load_all(manifest, Loader=_Loader) if d]
    deployments = [d for d in docs if d.get("kind") == "Deployment"]
    if len(deployments) != 1:
        raise ValueError(f"install.yaml has {len(deployments)} Deployments, not 1")
    containers = deployments[0]["spec"]["template"]["spec"]["containers"]
    found = [c for c in containers if c.get("name") == CONTAINER]
    if len(found) != 1:
        raise ValueError(f"install.yaml's Deployment has no container {CONTAINER}")
    return str(found[0]["image"])


def check_image(dist: Path, version: str) -> list[str]:
    """install.yaml pins the controller's image by the digest of the OCI archive in ``dist``."""
    archive = dist / archive_name(version)
    if not archive.is_file():
        return [f"no {archive.name}"]
    try:
        digest = archive_digest(archive)
    except (ValueError, tarfile.TarError, json.JSONDecodeError) as err:
        return [str(err)]
    problems = []
    recorded = (
        (dist / "image.digest").read_text().strip() if (dist / "image.digest").is_file() else None
    )
    if recorded != digest:
        problems.append(f"image.digest is {recorded!r}, the archive's manifest is {digest}")
    install = dist / "install.yaml"
    if not install.is_file():
        return [*problems, "no install.yaml"]
    try:
        image = _controller_image(install.read_text())
    except (ValueError, KeyError, TypeError, yaml.YAMLError) as err:
        return [*problems, f"install.yaml: {err}"]
    repository = image.split("@", 1)[0].rsplit(":", 1)[0]
    if image != image_reference(repository, version, digest):
        problems.append(
            f"install.yaml's image is {image}, not "
            f"{image_reference(repository, version, digest)} (the archive's digest)"
        )
    return problems


def check_chart(dist: Path, version: str) -> list[str]:
    """The chart's Chart.yaml has version and appVersion equal to ``version``."""
    tgz = dist / f"{CHART_NAME}-{version}.tgz"
    if not tgz.is_file():
        return [f"no {tgz.name}"]
    try:
        with tarfile.open(tgz) as tar:
            f = tar.extractfile(f"{CHART_NAME}/Chart.yaml")
            chart = yaml.safe_load(f.read()) if f is not None else None
    except (KeyError, tarfile.TarError, yaml.YAMLError) as err:
        return [f"{tgz.name}: no readable {CHART_NAME}/Chart.yaml ({err})"]
    if not isinstance(chart, dict):
        return [f"{tgz.name}: Chart.yaml is not a mapping"]
    return [
        f"{tgz.name}: Chart.yaml's {key} is {chart.get(key)!r}, not {version!r}"
        for key in ("version", "appVersion")
        if str(chart.get(key)) != version
    ]


def check_python(dist: Path, version: str) -> list[str]:
    """One wheel and one sdist, named with the PEP 440 form of ``version``, whose metadata say
    that version."""
    pep440 = to_pep440(version)
    problems = []
    wheels = sorted(p.name for p in dist.glob("agentsandbox-*.whl"))
    want = f"agentsandbox-{pep440}-py3-none-any.whl"
    if wheels != [want]:
        problems.append(f"wheels {wheels}, expected [{want!r}]")
    else:
        with zipfile.ZipFile(dist / want) as whl:
            meta = f"agentsandbox-{pep440}.dist-info/METADATA"
            got = (
                email.message_from_bytes(whl.read(meta))["Version"]
                if meta in whl.namelist()
                else None
            )
        if got != pep440:
            problems.append(f"{want}: METADATA's Version is {got!r}, not {pep440!r}")
    sdists = sorted(p.name for p in dist.glob("agentsandbox-*.tar.gz"))
    want = f"agentsandbox-{pep440}.tar.gz"
    if sdists != [want]:
        problems.append(f"sdists {sdists}, expected [{want!r}]")
    else:
        with tarfile.open(dist / want) as tar:
            try:
                f = tar.extractfile(f"agentsandbox-{pep440}/PKG-INFO")
            except KeyError:
                f = None
            got = email.message_from_bytes(f.read())["Version"] if f is not None else None
        if got != pep440:
            problems.append(f"{want}: PKG-INFO's Version is {got!r}, not {pep440!r}")
    return problems


def check_notes(dist: Path, version: str, changelog: str) -> list[str]:
    """RELEASE.md is this version's section of the changelog."""
    notes = dist / "RELEASE.md"
    if not notes.is_file():
        return ["no RELEASE.md"]
    try:
        want = section(changelog, version)
    except ChangelogError as err:
        return [str(err)]
    if notes.read_text() != want:
        return [f"RELEASE.md is not the section of {version} in CHANGELOG.md"]
    return []


def rebuilt_digest(version: str) -> str:
    """The image built again from the same inputs into a temporary directory (the caches
    `make image` filled are used): its manifest digest."""
    with tempfile.TemporaryDirectory(prefix="agentsandbox-release-check-") as tmp:
        argv = [sys.executable, str(HERE / "image" / "build.py"), "--dist", f"{tmp}/dist"]
        proc = subprocess.run(
            [*argv, "--work", f"{tmp}/work"],
            env=dict(os.environ, VERSION=version),
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"the second image build failed:\n{proc.stderr[-3000:]}")
        return proc.stdout.strip().splitlines()[-1]


def check_rebuild(dist: Path, version: str, rebuild: Callable[[str], str]) -> list[str]:
    """A second build of the image gives the archive's digest."""
    archive = dist / archive_name(version)
    try:
        first = archive_digest(archive)
    except (OSError, ValueError, tarfile.TarError) as err:
        return [str(err)]
    second = rebuild(version)
    if second != first:
        return [f"a second image build gave {second}, the archive has {first}"]
    return []


def run_checks(dist: Path, version: str, rebuild_image: bool) -> list[tuple[str, list[str], float]]:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    checks: list[tuple[str, Callable[[], list[str]]]] = [
        ("SHA256SUMS", lambda: check_sums(dist)),
        ("image pinned by digest", lambda: check_image(dist, version)),
        ("chart versions", lambda: check_chart(dist, version)),
        ("wheel and sdist versions", lambda: check_python(dist, version)),
        ("RELEASE.md", lambda: check_notes(dist, version, changelog)),
    ]
    if rebuild_image:
        checks.append(
            ("same image digest rebuilt", lambda: check_rebuild(dist, version, rebuilt_digest))
        )
    out = []
    for name, check in checks:
        start = time.monotonic()
        out.append((name, check(), time.monotonic() - start))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist", type=Path, required=True)
    parser.add_argument("--version", required=True, help="the SemVer 2 version built")
    parser.add_argument("--rebuild-image", action="store_true")
    args = parser.parse_args(argv)
    try:
        results = run_checks(args.dist, args.version, args.rebuild_image)
    except (VersionError, RuntimeError) as err:
        print(f"release-check: {err}", file=sys.stderr)
        return 1
    failed = False
    for name, problems, took in results:
        result = "FAILED" if problems else "ok"
        print(f"release-check {args.version}: {name}: {result} ({took:.1f} s)")
        for problem in problems:
            print(f"  - {problem}")
        failed = failed or bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
