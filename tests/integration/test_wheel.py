"""The package as users get it: `python -m build` makes a wheel and an sdist; the wheel installs
into a clean virtualenv with no network (from .wheelhouse/, which `make venv` fills with the
hash-locked runtime dependencies and the [tracing] extra's, hack/wheelhouse.py) and the controller
runs from it against the local control plane until /readyz answers OK. The wheel holds no
dev-only code and pulls in no dev-only dependency; without the [tracing] extra, --enable-tracing
says what to install. (The image installs the same wheel from the hash-locked
hack/image/runtime.lock: tests/image/.)

With RELEASE_DIST set (`make release-check`), the wheel and sdist are the release's, from that
directory, instead of a build of the checkout."""

from __future__ import annotations

import email
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from agentsandbox.devcluster.cluster import DevCluster, free_port
from tests.controller_process import becomes_ready

from .test_deploy import ROOT

WHEELHOUSE = ROOT / ".wheelhouse"
# only development uses these (pyproject.toml: the wheel's exclude, the devtools dependency group)
DEV_ONLY_MODULES = (
    "agentsandbox/devcluster/",
    "agentsandbox/sim/",
    "agentsandbox/cli/demo.py",
    "agentsandbox/cli/demo_plot.py",
    "agentsandbox/cli/devcluster.py",
)
DEV_ONLY_DISTRIBUTIONS = ("rich", "cryptography", "matplotlib", "pytest", "mypy", "PyYAML")


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
    """The release directory RELEASE_DIST when set; else `python -m build` of the checkout (no
    build isolation: hatchling is a dev dependency, so nothing is downloaded)."""
    release = os.environ.get("RELEASE_DIST")
    if release:
        return Path(release).resolve()
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
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = email.message_from_bytes(whl.read(meta)).get_all("Requires-Dist") or []
    assert "agentsandbox/cli/controller.py" in names
    assert "agentsandbox/kube/client.py" in names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "deploy/"))]
    assert not [n for n in names if n.startswith(DEV_ONLY_MODULES)]
    assert "agent-sandbox-controller = agentsandbox.cli.controller:main" in scripts
    assert "agentsandbox-devcluster" not in scripts
    assert not [
        r
        for r in requires
        if r.lower().startswith(tuple(d.lower() for d in DEV_ONLY_DISTRIBUTIONS))
    ]
    assert [r for r in requires if "opentelemetry" in r] and all(
        "extra == 'tracing'" in r for r in requires if "opentelemetry" in r
    )
    with tarfile.open(sdist) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
    assert {"pyproject.toml", "README.md", "src/agentsandbox/cli/controller.py"} <= members


def install_offline(dist: Path, venv: Path, extras: str = "") -> dict[str, str]:
    """The wheel (with ``extras``) into a new virtualenv from .wheelhouse/ only; the env used."""
    assert (WHEELHOUSE / ".complete").is_file(), "no .wheelhouse/: run `make venv`"
    (wheel,) = dist.glob("agentsandbox-*.whl")
    env = offline_env()
    run(sys.executable, "-m", "venv", str(venv), cwd=venv.parent, env=env)
    run(
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--find-links",
        str(WHEELHOUSE),
        f"{wheel}[{extras}]" if extras else str(wheel),
        cwd=venv.parent,
        env=env,
    )
    return env


def test_the_wheel_without_extras_has_no_dev_code_and_tracing_says_what_to_install(
    dist: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    env = install_offline(dist, venv)
    python = str(venv / "bin" / "python")
    listed = run(python, "-m", "pip", "list", "--format=freeze", cwd=tmp_path, env=env)
    installed = {line.split("==")[0].lower().replace("_", "-") for line in listed.splitlines()}
    assert {"agentsandbox", "kubernetes-asyncio", "pyyaml"} <= installed  # PyYAML: transitively
    for name in ("rich", "cryptography", "matplotlib", "opentelemetry-sdk", "opentelemetry-api"):
        assert name not in installed, (name, sorted(installed))
    missing = run(
        python,
        "-c",
        "import importlib.util as u; print([m for m in ('agentsandbox.devcluster', "
        "'agentsandbox.sim', 'agentsandbox.cli.demo', 'agentsandbox.cli.devcluster') "
        "if u.find_spec(m) is None])",
        cwd=tmp_path,
        env=env,
    )
    assert missing.strip() == str(
        [
            "agentsandbox.devcluster",
            "agentsandbox.sim",
            "agentsandbox.cli.demo",
            "agentsandbox.cli.devcluster",
        ]
    )
    assert not (venv / "bin" / "agentsandbox-devcluster").exists()
    proc = subprocess.run(
        [
            str(venv / "bin" / "agent-sandbox-controller"),
            "--enable-tracing",
            "--leader-elect=false",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,  # only stops a hung start
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "pip install 'agentsandbox[tracing]'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_installed_controller_prints_the_wheels_version(dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("agentsandbox-*.whl")
    version = wheel.name.split("-")[1]
    venv = tmp_path / "venv"
    env = install_offline(dist, venv)
    out = run(str(venv / "bin" / "agent-sandbox-controller"), "--version", cwd=tmp_path, env=env)
    assert out.startswith(f"agent-sandbox-controller, version {version} "), out


def test_the_wheel_installs_offline_and_the_controller_becomes_ready(
    dist: Path, cluster: DevCluster, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    env = install_offline(dist, venv, extras="tracing")
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
    becomes_ready(
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
        log=log,
        probes=probes,
        metrics=metrics,
        within=60,
        what="/readyz OK from the wheel's controller",
    )
