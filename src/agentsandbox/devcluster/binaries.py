"""Find the control plane binaries, building them once per machine when missing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
)

ENV_BIN_DIR = "AGENTSANDBOX_CONTROLPLANE_BIN"


class BinariesError(RuntimeError):
    """The control plane binaries could not be found or built."""


def repo_root() -> Path | None:
    """The source checkout this package runs from (editable install), if any."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "hack" / "controlplane" / "build.sh").is_file():
            return parent
    return None


def find_bin_dir(*, build: bool = True) -> Path:
    """Return the directory holding every control plane binary.

    ``$AGENTSANDBOX_CONTROLPLANE_BIN`` wins; otherwise ``hack/controlplane/build.sh`` reports the
    cache directory for the pinned versions, compiling first if that cache is empty.
    """
    env = os.environ.get(ENV_BIN_DIR)
    if env:
        path = Path(env)
        missing = [b for b in BINARIES if not (path / b).is_file()]
        if missing:
            raise BinariesError(f"${ENV_BIN_DIR}={env} lacks {', '.join(missing)}")
        return path
    root = repo_root()
    if root is None:
        raise BinariesError(
            f"cannot find hack/controlplane/build.sh; set ${ENV_BIN_DIR} to a directory "
            f"with {', '.join(BINARIES)}"
        )
    script = root / "hack" / "controlplane" / "build.sh"
    if not build:
        raise BinariesError("control plane binaries are not built; run `make controlplane`")
    proc = subprocess.run(
        ["bash", str(script)], stdout=subprocess.PIPE, stderr=None, text=True, check=False
    )
    if proc.returncode != 0:
        raise BinariesError(f"{script} failed with exit code {proc.returncode}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        raise BinariesError(f"{script} printed no binary directory")
    return Path(lines[-1].strip())


def versions(bin_dir: Path) -> dict[str, object]:
    try:
        data = json.loads((bin_dir / "versions.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
