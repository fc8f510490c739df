"""The other side of tests/release_artifacts/test_image_rootfs.py: run where the effective user
is not root, that module skips every test with its declared reason (NOT_ROOT, tests/conftest.py)
and the run passes. CI runs as root, so the module is run in a pytest whose ``os.geteuid`` gives
65534 (the UID ``nobody`` has). It once ran in a user namespace (``unshare --user``) instead; that
passed here, but a CI machine may forbid new user namespaces (a release-check run there failed
one test, most likely this one), so the test no longer depends on what the kernel allows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import NOT_ROOT

ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests/release_artifacts/test_image_rootfs.py"


NOBODY = 65534
# pytest, started with the effective UID reported as nobody's
AS_NOBODY = (
    f"import os, sys, pytest; os.geteuid = lambda: {NOBODY}; sys.exit(pytest.main(sys.argv[1:]))"
)


def test_the_rootfs_module_skips_with_its_declared_reason_when_not_root() -> None:
    command = [sys.executable, "-c", AS_NOBODY, "-p", "no:cacheprovider", "-rs", MODULE]
    run = subprocess.run(
        command, cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=240
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "2 skipped" in out, out
    assert out.count(f"declared: {MODULE}::") == 2, out
    assert NOT_ROOT in out, out
    assert "passed" not in out.splitlines()[-1], out
