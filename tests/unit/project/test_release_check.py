"""hack/release_check.py (`make release-check`): each check passes on a whole release directory
and fails, naming the problem, on one broken in its way. The release directory is fabricated
small: a two-file OCI image written by hack/image/oci.py, install.yaml from deploy/ by
hack/release.py, a chart, wheel and sdist holding only the files the checks read."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "hack"))
sys.path.insert(0, str(ROOT / "hack" / "image"))

import oci  # noqa: E402
import release  # noqa: E402
import release_check  # noqa: E402

VERSION = "1.2.3-rc.1"
PEP440 = "1.2.3rc1"
CHANGELOG = "# Changelog\n\n## [1.2.3] - 2026-12-01\n\n- a change\n\n## [1.2.2] - x\n\nold\n"


def _tar_gz(path: Path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _chart(path: Path, version: str, app_version: str) -> None:
    chart = (
        f"apiVersion: v2\nname: agent-sandbox\nversion: {version}\nappVersion: {app_version!r}\n"
    )
    _tar_gz(path, {"agent-sandbox/Chart.yaml": chart.encode()})


def _wheel(path: Path, version: str) -> None:
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(
            f"agentsandbox-{PEP440}.dist-info/METADATA",
            f"Metadata-Version: 2.4\nName: agentsandbox\nVersion: {version}\n",
        )


def _sums(dist: Path) -> None:
    (dist / "SHA256SUMS").write_text(release.sha256sums(dist))


_INSTALL: dict[str, str] = {}


@pytest.fixture
def dist(tmp_path: Path) -> Path:
    """A whole release of VERSION, as `make release` lays it out."""
    rootfs = tmp_path / "rootfs"
    (rootfs / "usr/bin").mkdir(parents=True)
    (rootfs / "usr/bin/agent-sandbox-controller").write_text("#!/usr/bin/python3.11\n")
    out = tmp_path / "dist"
    image = oci.write_image(
        rootfs,
        oci.ImageConfig(entrypoint=("/usr/bin/agent-sandbox-controller",)),
        out / release_check.archive_name(VERSION),
        tmp_path / "work",
        ref_name=VERSION,
    )
    (out / "image.digest").write_text(image.manifest_digest + "\n")
    ref = release.image_reference("registry.example/ctl", VERSION, image.manifest_digest)
    if ref not in _INSTALL:  # the same every time (the image is reproducible): made once
        _INSTALL[ref] = release.install_yaml(ROOT / "deploy", ref)
    (out / "install.yaml").write_text(_INSTALL[ref])
    _chart(out / f"agent-sandbox-{VERSION}.tgz", VERSION, VERSION)
    _wheel(out / f"agentsandbox-{PEP440}-py3-none-any.whl", PEP440)
    _tar_gz(
        out / f"agentsandbox-{PEP440}.tar.gz",
        {f"agentsandbox-{PEP440}/PKG-INFO": f"Name: agentsandbox\nVersion: {PEP440}\n".encode()},
    )
    (out / "RELEASE.md").write_text(release_check.section(CHANGELOG, VERSION))
    _sums(out)
    return out


def _all(dist: Path) -> dict[str, list[str]]:
    return {
        "sums": release_check.check_sums(dist),
        "image": release_check.check_image(dist, VERSION),
        "chart": release_check.check_chart(dist, VERSION),
        "python": release_check.check_python(dist, VERSION),
        "notes": release_check.check_notes(dist, VERSION, CHANGELOG),
    }


def test_a_whole_release_passes_every_check(dist: Path) -> None:
    assert _all(dist) == {"sums": [], "image": [], "chart": [], "python": [], "notes": []}
    digest = (dist / "image.digest").read_text().strip()
    assert release_check.archive_digest(dist / release_check.archive_name(VERSION)) == digest


def _edit_sums(dist: Path, edit: Callable[[list[str]], list[str]]) -> None:
    lines = (dist / "SHA256SUMS").read_text().splitlines()
    (dist / "SHA256SUMS").write_text("".join(f"{ln}\n" for ln in edit(lines)))


def _other_digest_in_install(dist: Path) -> None:
    text = (dist / "install.yaml").read_text()
    digest = (dist / "image.digest").read_text().strip()
    (dist / "install.yaml").write_text(text.replace(digest, "sha256:" + "0" * 64))


def _by_tag_only(dist: Path) -> None:
    text = (dist / "install.yaml").read_text()
    digest = (dist / "image.digest").read_text().strip()
    (dist / "install.yaml").write_text(text.replace(f"@{digest}", ""))


def _tampered_manifest(dist: Path) -> None:
    """The archive's manifest blob rewritten under its old name (its digest no longer matches)."""
    archive = dist / release_check.archive_name(VERSION)
    files = oci.read_layout(archive)
    digest = json.loads(files["index.json"])["manifests"][0]["digest"]
    files[f"blobs/sha256/{digest[7:]}"] += b" "
    with tarfile.open(archive, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


BREAKAGES: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "a file changed after summing": (
        "sums",
        lambda d: (d / "install.yaml").write_text((d / "install.yaml").read_text() + "# x\n"),
        "install.yaml: its SHA-256 is not the one SHA256SUMS gives",
    ),
    "a file not summed": (
        "sums",
        lambda d: (d / "extra.txt").write_text("x"),
        "extra.txt is not in SHA256SUMS",
    ),
    "a summed file missing": (
        "sums",
        lambda d: (d / "image.digest").unlink(),
        "SHA256SUMS names image.digest, which is not there",
    ),
    "a malformed sums line": (
        "sums",
        lambda d: _edit_sums(d, lambda lines: [*lines, "nonsense"]),
        "SHA256SUMS line",
    ),
    "no SHA256SUMS": ("sums", lambda d: (d / "SHA256SUMS").unlink(), "no SHA256SUMS"),
    "install.yaml pins another digest": (
        "image",
        _other_digest_in_install,
        "install.yaml's image is registry.example/ctl:1.2.3-rc.1@sha256:0000",
    ),
    "install.yaml names the image by tag only": (
        "image",
        _by_tag_only,
        "install.yaml's image is registry.example/ctl:1.2.3-rc.1, not",
    ),
    "image.digest is another digest": (
        "image",
        lambda d: (d / "image.digest").write_text("sha256:" + "1" * 64 + "\n"),
        "image.digest is 'sha256:1111",
    ),
    "the manifest does not match its digest": (
        "image",
        _tampered_manifest,
        "the manifest blob does not match its digest",
    ),
    "no OCI archive": (
        "image",
        lambda d: (d / release_check.archive_name(VERSION)).unlink(),
        f"no {release_check.archive_name(VERSION)}",
    ),
    "the chart's appVersion is another": (
        "chart",
        lambda d: _chart(d / f"agent-sandbox-{VERSION}.tgz", VERSION, "0.1.0"),
        "Chart.yaml's appVersion is '0.1.0', not '1.2.3-rc.1'",
    ),
    "the chart's version is another": (
        "chart",
        lambda d: _chart(d / f"agent-sandbox-{VERSION}.tgz", "0.4.0", VERSION),
        "Chart.yaml's version is '0.4.0'",
    ),
    "the wheel's metadata say the SemVer form": (
        "python",
        lambda d: _wheel(d / f"agentsandbox-{PEP440}-py3-none-any.whl", VERSION),
        "METADATA's Version is '1.2.3-rc.1', not '1.2.3rc1'",
    ),
    "the wheel named with the SemVer form": (
        "python",
        lambda d: (d / f"agentsandbox-{PEP440}-py3-none-any.whl").rename(
            d / f"agentsandbox-{VERSION}-py3-none-any.whl"
        ),
        "wheels ['agentsandbox-1.2.3-rc.1-py3-none-any.whl'], expected",
    ),
    "a second sdist": (
        "python",
        lambda d: (d / "agentsandbox-1.2.2.tar.gz").write_bytes(b""),
        "sdists ['agentsandbox-1.2.2.tar.gz', 'agentsandbox-1.2.3rc1.tar.gz']",
    ),
    "notes of another version": (
        "notes",
        lambda d: (d / "RELEASE.md").write_text(release_check.section(CHANGELOG, "1.2.2")),
        "RELEASE.md is not the section of 1.2.3-rc.1",
    ),
    "no notes": ("notes", lambda d: (d / "RELEASE.md").unlink(), "no RELEASE.md"),
}


@pytest.mark.parametrize("broken", sorted(BREAKAGES))
def test_each_check_fails_on_its_broken_input_and_only_it(dist: Path, broken: str) -> None:
    check, breakage, says = BREAKAGES[broken]
    breakage(dist)
    if check != "sums":  # the other breakages are summed afresh: only their own check fails
        _sums(dist)
    results = _all(dist)
    assert any(says in problem for problem in results[check]), results[check]
    # a missing image.digest also leaves its SHA256SUMS line dangling; every other breakage is
    # caught by its own check alone
    others = {name: found for name, found in results.items() if name != check and found}
    if broken != "a summed file missing":
        assert others == {}, others


def test_the_notes_check_fails_when_the_changelog_has_no_section(dist: Path) -> None:
    problems = release_check.check_notes(dist, VERSION, "# Changelog\n\n## [0.1.0] - x\n")
    assert problems and "no section '## [1.2.3-rc.1]' nor '## [1.2.3]'" in problems[0]


def test_a_rebuild_with_another_digest_fails(dist: Path) -> None:
    digest = (dist / "image.digest").read_text().strip()
    assert release_check.check_rebuild(dist, VERSION, lambda v: digest) == []
    other = "sha256:" + hashlib.sha256(b"other").hexdigest()
    (problem,) = release_check.check_rebuild(dist, VERSION, lambda v: other)
    assert problem == f"a second image build gave {other}, the archive has {digest}"


def test_main_prints_each_check_and_exits_1_on_a_failure(
    dist: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(release_check, "ROOT", dist.parent)
    (dist.parent / "CHANGELOG.md").write_text(CHANGELOG)
    assert release_check.main(["--dist", str(dist), "--version", VERSION]) == 0
    out = capsys.readouterr().out
    assert out.count(": ok (") == 5, out
    (dist / "extra.txt").write_text("x")
    assert release_check.main(["--dist", str(dist), "--version", VERSION]) == 1
    out = capsys.readouterr().out
    assert "release-check 1.2.3-rc.1: SHA256SUMS: FAILED" in out
    assert "  - extra.txt is not in SHA256SUMS" in out
