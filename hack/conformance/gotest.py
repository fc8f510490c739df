"""Upstream's e2e test binaries: built (and cached) by ``build.sh``, listed, and run one test per
process (``-test.run '^Name$' -test.v``), each outcome read from the binary's own verbose output.

An outcome is ``pass`` only when the binary printed ``--- PASS: Name`` for the test and exited 0
with no ``--- SKIP`` anywhere (a skipped subtest counts as a skip); ``fail`` when it printed
``--- FAIL``, exited non-zero or printed no verdict at all (a panic, a timeout); ``skip`` when it
printed ``--- SKIP``; ``missing`` when neither binary lists the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build.sh"
# binary name (the package's name, as `go test -c` calls it) -> the package in the module
PACKAGES: dict[str, str] = {"e2e": "test/e2e", "extensions": "test/e2e/extensions"}
RESULTS = ("pass", "fail", "skip", "missing")


class BuildError(RuntimeError):
    """build.sh failed or left no binaries."""


@dataclass(frozen=True)
class Binaries:
    """The directory build.sh reported: ``<pkg>.test``, ``<pkg>.list``, ``versions.json``."""

    dir: Path

    def binary(self, package: str) -> Path:
        return self.dir / f"{package}.test"

    @property
    def controller(self) -> Path:
        """Upstream's own controller of the same release (the controller-switch fault tests)."""
        return self.dir / "agent-sandbox-controller"

    def listed(self, package: str) -> list[str]:
        """Everything ``-test.list .`` printed: tests, benchmarks, examples (one per line)."""
        lines = (self.dir / f"{package}.list").read_text().splitlines()
        return [line.strip() for line in lines if line.strip()]

    def package_of(self, test: str) -> str | None:
        for package in PACKAGES:
            if test in self.listed(package):
                return package
        return None

    def versions(self) -> dict[str, Any]:
        data = json.loads((self.dir / "versions.json").read_text())
        if not isinstance(data, dict):
            raise BuildError(f"{self.dir / 'versions.json'} holds no object")
        return data


def build() -> Binaries:
    """The cached binaries for the pinned release, built first when missing (build.sh's
    progress goes to stderr; it prints the directory last)."""
    proc = subprocess.run(
        ["bash", str(BUILD)], stdout=subprocess.PIPE, stderr=None, text=True, check=False
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        raise BuildError(f"{BUILD} failed (exit code {proc.returncode})")
    found = Binaries(Path(lines[-1].strip()))
    missing = [p for p in PACKAGES if not found.binary(p).is_file()]
    if missing:
        raise BuildError(f"{BUILD} printed {found.dir}, which lacks {', '.join(missing)}")
    return found


@dataclass(frozen=True)
class Outcome:
    test: str
    package: str | None
    result: str
    seconds: float
    exit_code: int | None = None
    log: Path | None = None
    detail: str = ""

    def tail(self, lines: int = 60) -> str:
        if self.log is None:
            return self.detail
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return self.detail
        return "\n".join(text.splitlines()[-lines:])


def verdict(test: str, output: str, exit_code: int) -> tuple[str, str]:
    """(result, why) from one test's ``-test.v`` output and the binary's exit code."""
    name = re.escape(test)
    if re.search(r"^\s*--- SKIP: ", output, re.MULTILINE):
        return "skip", "the output has a --- SKIP line"
    if re.search(rf"^--- FAIL: {name} \(", output, re.MULTILINE):
        return "fail", "--- FAIL"
    passed = re.search(rf"^--- PASS: {name} \(", output, re.MULTILINE) is not None
    if passed and exit_code == 0:
        return "pass", ""
    if passed:
        return "fail", f"--- PASS, but the binary exited {exit_code}"
    return "fail", f"no verdict for {test} in the output (exit code {exit_code})"


def run_one(
    binaries: Binaries,
    test: str,
    *,
    env: Mapping[str, str],
    log_dir: Path,
    timeout: float,
) -> Outcome:
    """Run ``test`` alone in its own process of the binary that lists it; its output (stdout and
    stderr together) goes to ``log_dir/<test>.log``. ``-test.timeout`` makes the binary panic
    with every goroutine's stack when it runs over; the process is killed 60 s later still."""
    package = binaries.package_of(test)
    if package is None:
        return Outcome(test, None, "missing", 0.0, detail="listed by neither binary")
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{test}.log"
    argv = [
        str(binaries.binary(package)),
        "-test.run",
        f"^{test}$",
        "-test.v",
        "-test.count=1",
        f"-test.timeout={int(timeout)}s",
    ]
    start = time.monotonic()
    with log.open("wb") as out:
        out.write(("$ " + " ".join(argv) + "\n").encode())
        out.flush()
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=dict(env), cwd=log_dir
        )
        try:
            code = proc.wait(timeout + 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    seconds = round(time.monotonic() - start, 1)
    result, why = verdict(test, log.read_text(errors="replace"), code)
    return Outcome(test, package, result, seconds, code, log, why)


def go_test_env(kubeconfig: Path, artifacts: Path, path_dirs: list[Path]) -> dict[str, str]:
    """What the framework reads: KUBECONFIG (else it looks for <repo>/bin/KUBECONFIG) and
    ARTIFACTS (else ./artifacts); kubectl on PATH for its port-forward and exec helpers."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "ARTIFACTS")}
    env["KUBECONFIG"] = str(kubeconfig)
    env["ARTIFACTS"] = str(artifacts)
    env["PATH"] = os.pathsep.join([*(str(p) for p in path_dirs), env.get("PATH", "")])
    return env
