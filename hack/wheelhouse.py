"""Fill .wheelhouse/ with the controller's runtime dependencies, for installing the wheel offline.

Run by ``make venv`` with the project's virtualenv (which has every runtime dependency installed
from requirements-dev.lock). The runtime closure of ``agentsandbox`` is read from the installed
distributions' metadata (markers evaluated for this interpreter); those entries of the hash-locked
requirements-dev.lock, and no others, are downloaded as wheels with ``--require-hashes``.
tests/integration/test_wheel.py then installs the built wheel with ``--no-index --find-links``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def runtime_closure(
    project: str = "agentsandbox", extras: tuple[str, ...] = ("tracing",)
) -> set[str]:
    """The project's runtime dependencies with its ``extras`` (the image installs
    ``agentsandbox[tracing]``), and theirs, transitively (theirs without extras)."""
    seen: set[str] = set()
    todo = [project]
    while todo:
        name = todo.pop()
        wanted = ("", *extras) if name == project else ("",)
        for text in distribution(name).requires or []:
            req = Requirement(text)
            if req.marker is not None and not any(
                req.marker.evaluate({"extra": e}) for e in wanted
            ):
                continue
            dep = canonicalize_name(req.name)
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def _name(line: str) -> str:
    """The distribution of a lock line ``name[extra,…]==version \\``."""
    return canonicalize_name(re.split(r"[\[=]", line, maxsplit=1)[0])


def locked_entries(lock: Path) -> dict[str, str]:
    """name -> the lock's whole entry (``name==version \\`` and its ``--hash`` lines)."""
    entries: dict[str, str] = {}
    current: list[str] = []
    for line in lock.read_text().splitlines():
        if re.match(r"^[A-Za-z0-9]", line):
            current = [line]
            entries[_name(line)] = ""
        elif line.strip().startswith("--hash") and current:
            current.append(line)
        else:
            continue
        entries[_name(current[0])] = "\n".join(current)
    return entries


def main() -> int:
    out = ROOT / ".wheelhouse"
    out.mkdir(exist_ok=True)
    needed = runtime_closure()
    entries = locked_entries(ROOT / "requirements-dev.lock")
    missing = needed - set(entries)
    if missing:
        print(f"not in requirements-dev.lock: {sorted(missing)}", file=sys.stderr)
        return 1
    reqs = out / "requirements.txt"
    reqs.write_text("\n".join(entries[n].rstrip(" \\") for n in sorted(needed)) + "\n")
    return subprocess.call(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--require-hashes",
            "--only-binary=:all:",
            "-d",
            str(out),
            "-r",
            str(reqs),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
