"""Upstream v1.0.1's own e2e test ``TestSimpleSandbox`` (its compiled test binary) against our
controller on the session's control plane: the wiring of ``make conformance`` checked by every
``make test`` (the binary from hack/conformance/build.sh, deploy/'s namespace, RBAC and
placeholder Deployment, the controller stand-in that runs our controller with the Deployment's
args and the deploy/ ServiceAccount's token). ``make conformance`` runs the whole required list,
on a private control plane of its own.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentsandbox.devcluster.cluster import DevCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from conformance import environment, gotest


@pytest.mark.timeout(900)
def test_upstream_simple_sandbox_passes_against_our_controller(
    cluster: DevCluster, tmp_path: Path
) -> None:
    """Under 30 s with the binaries in the build cache (make test's ``conformance-build`` step
    builds them first); without them, build.sh compiles them here, which takes minutes on a cold
    machine: hence the timeout."""
    try:
        binaries = gotest.build()
    except gotest.BuildError as err:
        pytest.fail(str(err), pytrace=False)
    assert cluster.bin_dir is not None
    environment.install(cluster)
    try:
        with environment.ControllerStandIn(cluster, tmp_path / "controller") as standin:
            outcome = gotest.run_one(
                binaries,
                "TestSimpleSandbox",
                env=gotest.go_test_env(
                    cluster.kubeconfig, tmp_path / "artifacts", [cluster.bin_dir]
                ),
                log_dir=tmp_path / "logs",
                timeout=120,
            )
    finally:
        environment.uninstall(cluster)
    logs = ", ".join(str(p) for p in standin.logs)
    assert outcome.result == "pass", f"{outcome.detail}\n{outcome.tail()}\ncontroller: {logs}"
    assert not standin.crashes, standin.crashes
