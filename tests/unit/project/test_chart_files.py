"""The Helm chart deploy/helm/agent-sandbox: its packaged copies of deploy/crds/ and
deploy/monitoring/ and the controller's version in its Chart.yaml (appVersion) and in
deploy/controller.yaml (the image tag), all written by hack/sync_chart.py, do not drift from
their sources (the version: pyproject.toml's, the one place it is written), and its kubeVersion
claims the Kubernetes version the tests run on, no other."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "agent-sandbox"
SYNC = ROOT / "hack" / "sync_chart.py"
sys.path.insert(0, str(ROOT / "hack"))

import semver  # noqa: E402


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
    for part in ("deploy", "hack/sync_chart.py", "hack/semver.py", "pyproject.toml"):
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


def test_the_controller_version_in_the_chart_and_deploy_is_pyprojects() -> None:
    version = semver.to_semver(semver.project_version(ROOT))
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == version
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "controller.yaml").read_text()))
    (dep,) = [d for d in docs if d and d["kind"] == "Deployment"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"agentsandbox/agent-sandbox-controller:{version}"


def test_the_drift_check_fails_on_a_new_project_version(tmp_path: Path) -> None:
    """A copy of the tree whose pyproject.toml has another version: the check names the two
    files, the sync writes the version (as SemVer) into them and changes nothing else."""
    for part in ("deploy", "hack/sync_chart.py", "hack/semver.py", "pyproject.toml"):
        src, dst = ROOT / part, tmp_path / part
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            subprocess.run(["cp", "-r", str(src), str(dst)], check=True)
        else:
            dst.write_bytes(src.read_bytes())
    old = semver.project_version(ROOT)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(f'version = "{old}"', 'version = "9.8.7rc1"')
    )
    chart, controller = (
        tmp_path / "deploy/helm/agent-sandbox/Chart.yaml",
        tmp_path / "deploy/controller.yaml",
    )
    before = {p: p.read_text() for p in (chart, controller)}
    run = [sys.executable, str(tmp_path / "hack" / "sync_chart.py")]
    failed = subprocess.run([*run, "--check"], capture_output=True, text=True, check=False)
    assert failed.returncode == 1, failed.stdout
    assert str(chart) in failed.stdout and str(controller) in failed.stdout, failed.stdout
    subprocess.run(run, check=True)
    assert subprocess.run([*run, "--check"], check=False).returncode == 0
    changed = {}
    for path, text in before.items():
        new = path.read_text().splitlines()
        assert len(new) == len(text.splitlines()), path
        changed[path.name] = [b for a, b in zip(text.splitlines(), new, strict=True) if a != b]
    assert changed == {
        "Chart.yaml": ['appVersion: "9.8.7-rc.1"'],
        "controller.yaml": ["          image: agentsandbox/agent-sandbox-controller:9.8.7-rc.1"],
    }


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
