"""The entry points users and other work rely on stay where they are: the make targets, the two
console commands, ``python -m agentsandbox.sim`` and the CRDs in ``deploy/crds/``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent

# each target and a command its recipe runs (``make -n`` prints the recipe, runs nothing)
TARGETS = {
    "demo": "-m agentsandbox.cli.demo",
    "test": "-m pytest tests/unit --cov",
    "cluster": "-m agentsandbox.cli.devcluster up",
    "cluster-down": "-m agentsandbox.cli.devcluster down",
    "bench": "bench/run.py",
    "soak": "bench/soak.py",
}


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_the_make_target_is_there_and_runs_its_command(target: str) -> None:
    make = shutil.which("make")
    assert make is not None, "make is not installed"
    proc = subprocess.run(
        [make, "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60
    )  # the timeout only stops a hung run
    assert proc.returncode == 0, proc.stderr
    assert TARGETS[target] in proc.stdout, proc.stdout


@pytest.mark.parametrize(
    ("command", "says"),
    [("agent-sandbox-controller", "-leader-elect"), ("agentsandbox-devcluster", "up,down,status")],
)
def test_the_console_command_answers_help(command: str, says: str) -> None:
    proc = subprocess.run(
        [str(BIN / command), "--help"], capture_output=True, text=True, timeout=60
    )  # the timeout only stops a hung run
    assert proc.returncode == 0, proc.stderr
    assert says in proc.stdout + proc.stderr


def test_the_simulator_runs_as_a_module_with_its_flags() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agentsandbox.sim", "--help"],
        capture_output=True,
        text=True,
        timeout=60,  # only stops a hung run
    )
    assert proc.returncode == 0, proc.stderr
    for flag in ("--trace", "--latency", "--csv"):
        assert flag in proc.stdout


def test_the_crds_stay_in_deploy_crds() -> None:
    names = sorted(p.name for p in (ROOT / "deploy" / "crds").glob("*.yaml"))
    assert names == [
        "agents.x-k8s.io_sandboxes.yaml",
        "autoscaling.agentsandbox.dev_sandboxwarmpoolautoscalers.yaml",
        "extensions.agents.x-k8s.io_sandboxclaims.yaml",
        "extensions.agents.x-k8s.io_sandboxtemplates.yaml",
        "extensions.agents.x-k8s.io_sandboxwarmpools.yaml",
    ]
