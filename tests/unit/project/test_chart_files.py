"""The Helm chart deploy/helm/agent-sandbox: its packaged copies of deploy/crds/ and
deploy/monitoring/ (written by hack/sync_chart.py) do not drift, and its kubeVersion claims the
Kubernetes version the tests run on, no other."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "agent-sandbox"
SYNC = ROOT / "hack" / "sync_chart.py"


def check() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SYNC), "--check"], capture_output=True, text=True, check=False
    )


def test_the_charts_crds_and_monitoring_files_are_copies_of_deploys() -> None:
    result = check()
    assert result.returncode == 0, result.stdout
    # copies, not links (helm package and every checkout carry them)
    for sub in ("crds", "monitoring"):
        files = sorted((CHART / "files" / sub).iterdir())
        assert files and not any(p.is_symlink() for p in [CHART / "files" / sub, *files])
    assert len(list((CHART / "files" / "crds").glob("*.yaml"))) == 5


def test_the_drift_check_fails_on_a_changed_copy(tmp_path: Path) -> None:
    """Run against a copy of the tree, so the check is seen to fail (and the sync to repair)."""
    for part in ("deploy", "hack/sync_chart.py"):
        src = ROOT / part
        dst = tmp_path / part
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            subprocess.run(["cp", "-r", str(src), str(dst)], check=True)
        else:
            dst.write_bytes(src.read_bytes())
    copy = tmp_path / "deploy/helm/agent-sandbox/files/crds/agents.x-k8s.io_sandboxes.yaml"
    copy.write_text(copy.read_text() + "# edited\n")
    script = tmp_path / "hack" / "sync_chart.py"
    run = [sys.executable, str(script)]
    failed = subprocess.run([*run, "--check"], capture_output=True, text=True, check=False)
    assert failed.returncode == 1 and copy.name in failed.stdout, failed.stdout
    subprocess.run(run, check=True)
    assert subprocess.run([*run, "--check"], check=False).returncode == 0


def test_the_kube_version_is_the_tested_one() -> None:
    """Chart.yaml's kubeVersion admits exactly the minor version of hack/controlplane's
    Kubernetes (every integration test runs on it); a wider claim needs a test on that version."""
    tested = next(
        line.split("=", 1)[1].strip().lstrip("v")
        for line in (ROOT / "hack/controlplane/versions.env").read_text().splitlines()
        if line.startswith("KUBERNETES_VERSION=")
    )
    major, minor, _ = tested.split(".")
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == f">={major}.{minor}.0-0 <{major}.{int(minor) + 1}.0-0"
