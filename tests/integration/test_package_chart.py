"""hack/package_chart.sh (``make chart``, part of ``make release``) gives the same bytes on every
run: helm writes each file's mtime into the archive, so the script sets ``SOURCE_DATE_EPOCH`` to
the last commit's time, as hack/release.py does for the wheel and sdist. Uses the cached helm
(hack/controlplane/build-helm.sh); no cluster, no network."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "hack" / "package_chart.sh"
CHART_FILE = ROOT / "deploy" / "helm" / "agent-sandbox" / "values.yaml"
VERSION = "1.2.0-rc.1+b.7"


def package(dist: Path) -> bytes:
    # as `make release` runs it: SOURCE_DATE_EPOCH unset, so the script takes the commit's time
    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    out = subprocess.run(
        ["bash", str(SCRIPT), VERSION, "registry.example/ctl", str(dist)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    tgz = Path(out.stdout.strip().splitlines()[-1])
    assert tgz == dist / f"agent-sandbox-{VERSION}.tgz"
    return tgz.read_bytes()


def test_the_packaged_chart_is_the_same_bytes_twice(tmp_path: Path) -> None:
    first = package(tmp_path / "one")
    # a chart file touched between the runs (as a checkout or an edit-and-revert does); the
    # repository's file keeps its content, and its old times are put back
    before = CHART_FILE.stat()
    try:
        os.utime(CHART_FILE, ns=(before.st_atime_ns, before.st_mtime_ns + 3_600 * 10**9))
        second = package(tmp_path / "two")
    finally:
        os.utime(CHART_FILE, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert first == second
    commit_time = int(
        subprocess.run(
            ["git", "log", "-1", "--format=%ct"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    with tarfile.open(fileobj=io.BytesIO(first), mode="r:gz") as tar:
        mtimes = {m.name: m.mtime for m in tar.getmembers()}
    assert "agent-sandbox/values.yaml" in mtimes
    assert set(mtimes.values()) == {commit_time}, mtimes
