"""The package as users get it: `python -m build` makes a wheel and an sdist; the wheel installs
into a clean virtualenv with no network (from .wheelhouse/, which `make venv` fills with the
hash-locked runtime dependencies, hack/wheelhouse.py) and the controller runs from it against the
local control plane until /readyz answers OK. (The image installs the same wheel from the
hash-locked hack/image/runtime.lock: tests/image/.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from pathlib import Path

import pytest

from agentsandbox.devcluster.cluster import DevCluster, free_port
from tests.polling import eventually_sync

from .test_deploy import ROOT

WHEELHOUSE = ROOT / ".wheelhouse"


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=240
    )
    assert proc.returncode == 0, (args, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout


def offline_env() -> dict[str, str]:
    """pip may use nothing but local files: no index, no config, no proxy to fall back on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "KUBECONFIG"}
    env |= {
        "PIP_NO_INDEX": "1",
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    env |= {"https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}
    return env


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m build` of the checkout (no build isolation: hatchling is a dev dependency, so
    nothing is downloaded)."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), ".", cwd=ROOT)
    return out


def test_build_makes_a_wheel_and_an_sdist(dist: Path) -> None:
    (wheel,) = dist.glob("agentsandbox-*-py3-none-any.whl")
    (sdist,) = dist.glob("agentsandbox-*.tar.gz")
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = whl.read(entry_points).decode()
    assert "agentsandbox/cli/controller.py" in names
    assert "agentsandbox/kube/client.py" in names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "deploy/"))]
    assert "agent-sandbox-controller = agentsandbox.cli.controller:main" in scripts
    with tarfile.open(sdist) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
    assert {"pyproject.toml", "README.md", "src/agentsandbox/cli/controller.py"} <= members


def test_the_wheel_installs_offline_and_the_controller_becomes_ready(
    dist: Path, cluster: DevCluster, tmp_path: Path
) -> None:
    assert (WHEELHOUSE / ".complete").is_file(), "no .wheelhouse/: run `make venv`"
    (wheel,) = dist.glob("agentsandbox-*.whl")
    venv = tmp_path / "venv"
    env = offline_env()
    run(sys.executable, "-m", "venv", str(venv), cwd=tmp_path, env=env)
    run(
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--find-links",
        str(WHEELHOUSE),
        str(wheel),
        cwd=tmp_path,
        env=env,
    )
    # the package is the installed copy, not the checkout
    where = run(
        str(venv / "bin" / "python"),
        "-c",
        "import agentsandbox; print(agentsandbox.__file__)",
        cwd=tmp_path,
        env=env,
    )
    assert where.startswith(str(venv / "lib")), where

    metrics, probes = free_port(), free_port()
    log = tmp_path / "controller.log"
    # tracing: spans (if any) go to a closed local port, never off the machine
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{free_port()}"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(venv / "bin" / "agent-sandbox-controller"),
                f"--kubeconfig={cluster.kubeconfig}",
                "--extensions",
                "--enable-tracing",
                "--leader-elect=false",
                f"--metrics-bind-address=127.0.0.1:{metrics}",
                f"--health-probe-bind-address=127.0.0.1:{probes}",
            ],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def readyz() -> str | None:
            assert proc.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{probes}/readyz?verbose", timeout=2
                ) as r:
                    return str(r.read().decode()) if r.status == 200 else None
            except OSError:
                return None

        body = eventually_sync(readyz, within=60, what="/readyz OK from the wheel's controller")
        assert "informers-synced" in body, body
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as r:
            assert b"agent_sandbox_build_info" in r.read()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    assert code == 0, log.read_text()
