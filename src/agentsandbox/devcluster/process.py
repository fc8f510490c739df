"""The control plane's processes: a :class:`Component` (command line, log, health check), started
in its own session and waited on until healthy, and stopped by PID (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


class ClusterStartError(RuntimeError):
    """A component failed to start. The message names it and its log."""


def tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def pid_alive(pid: int, exe: str | None = None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    if exe is None:
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if not cmdline or not cmdline[0]:
        return False  # a zombie: exited, not yet reaped
    return cmdline[0].decode(errors="replace") == exe


@dataclass
class Component:
    name: str
    argv: list[str]
    log: Path
    health: Callable[[], bool]
    proc: subprocess.Popen[bytes] | None = None
    pid: int | None = None

    @property
    def exe(self) -> str:
        return self.argv[0]

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.pid is not None and pid_alive(self.pid, self.exe)


def spawn(comp: Component, cwd: Path) -> None:
    """Start ``comp``'s process, its output appended to its log."""
    with comp.log.open("ab") as out:
        comp.proc = subprocess.Popen(
            comp.argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,  # survives the starting process; Ctrl-C is ours to handle
        )


def wait_healthy(comp: Component, timeout: float) -> None:
    """Wait until ``comp``'s health check passes; ClusterStartError if it exits or times out."""
    name, log = comp.name, comp.log
    deadline = time.monotonic() + timeout
    delay = 0.05
    while not comp.health():
        if not comp.alive():
            code = comp.proc.returncode if comp.proc is not None else None
            raise ClusterStartError(
                f"{name} exited with code {code} during start-up; log: {log}\n"
                f"--- last lines of {log.name} ---\n{tail(log)}"
            )
        if time.monotonic() > deadline:
            raise ClusterStartError(
                f"{name} did not become healthy within {timeout:.0f}s; log: {log}\n"
                f"--- last lines of {log.name} ---\n{tail(log)}"
            )
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def terminate(comp: Component, grace: float = 10.0) -> None:
    """Stop ``comp`` by PID: SIGTERM, then SIGKILL after ``grace`` seconds."""
    pid = comp.proc.pid if comp.proc is not None else comp.pid
    if pid is None or not comp.alive():
        if comp.proc is not None:
            comp.proc.poll()
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while comp.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if comp.alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if comp.proc is not None:
            comp.proc.wait(5)
    elif comp.proc is not None:
        comp.proc.wait(5)


__all__ = [
    "ClusterStartError",
    "Component",
    "pid_alive",
    "spawn",
    "tail",
    "terminate",
    "wait_healthy",
]
