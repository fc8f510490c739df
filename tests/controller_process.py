"""The controller as a process of its own, as the tests that run a built artifact start it (the
wheel's console script, the image's entrypoint under chroot, the kustomize install's arguments):
stopping it, and waiting for it to become ready."""

from __future__ import annotations

import signal
import subprocess
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tests.polling import eventually_sync


def stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
    """SIGTERM (unless it has exited already), then its exit code. If it is still running after
    ``timeout`` seconds it is killed and the TimeoutExpired raised."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def becomes_ready(
    argv: Sequence[str],
    *,
    env: dict[str, str],
    log: Path,
    probes: int,
    metrics: int,
    within: float,
    what: str,
    cwd: Path | None = None,
) -> None:
    """``argv`` (a controller that binds its probes to 127.0.0.1:``probes`` and its metrics to
    127.0.0.1:``metrics``; its output goes to ``log``) answers /readyz with its informers synced
    within ``within`` seconds and serves its metrics; it then stops on SIGTERM with exit code 0."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
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

        body = eventually_sync(readyz, within=within, what=what)
        assert "informers-synced" in body, body
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as r:
            assert b"agent_sandbox_build_info" in r.read()
    finally:
        code = stop(proc)
    assert code == 0, log.read_text()
