"""A release's version: SemVer 2 for the chart and the image, its PEP 440 form for the wheel.

The one place the version is written is ``pyproject.toml`` (``[project] version``, which hatchling
requires in PEP 440 form); ``make release VERSION=…`` overrides it for one build with any SemVer 2
version, pre-releases included. Mapping of a SemVer pre-release onto PEP 440 (the build metadata
``+…`` becomes a PEP 440 local version, dots kept, ``-`` as ``.``):

==========================  =================
SemVer 2                    PEP 440
==========================  =================
``1.2.0``                   ``1.2.0``
``1.2.0-alpha.3``, ``-a.3``   ``1.2.0a3``
``1.2.0-beta.2``, ``-b2``     ``1.2.0b2``
``1.2.0-rc.1``, ``-rc1``      ``1.2.0rc1``
``1.2.0-rc``                ``1.2.0rc0``
``1.2.0-dev.4``             ``1.2.0.dev4``
``1.2.0-rc.1+build.7``      ``1.2.0rc1+build.7``
==========================  =================

Any other pre-release (``1.2.0-foo``, ``1.2.0-rc.1.2``, ``1.2.0-rc.x``) has no PEP 440 form and is
refused with a message saying which forms map.

``python hack/semver.py`` prints pyproject's version as SemVer; ``--pep440 V`` prints V's PEP 440
form (V may be either form); ``--semver V`` prints V's SemVer form.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# semver.org's own pattern (numeric identifiers without leading zeros)
_NUM = r"0|[1-9]\d*"
_ID = r"(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
SEMVER = re.compile(
    rf"^(?P<core>(?:{_NUM})\.(?:{_NUM})\.(?:{_NUM}))"
    rf"(?:-(?P<pre>{_ID}(?:\.{_ID})*))?"
    r"(?:\+(?P<build>[0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
_PHASES = {"alpha": "a", "a": "a", "beta": "b", "b": "b", "rc": "rc", "c": "rc", "dev": ".dev"}
# a pre-release of one phase and an optional number: "rc.1", "rc1", "rc"
_PRE = re.compile(r"^(?P<phase>[a-zA-Z]+)(?:\.?(?P<n>0|[1-9]\d*))?$")
# the PEP 440 forms we write (and so can read back)
_PEP440 = re.compile(
    rf"^(?P<core>(?:{_NUM})\.(?:{_NUM})\.(?:{_NUM}))"
    r"(?:(?P<phase>a|b|rc|\.dev)(?P<n>0|[1-9]\d*))?"
    r"(?:\+(?P<local>[0-9a-zA-Z]+(?:\.[0-9a-zA-Z]+)*))?$"
)
_BACK = {"a": "alpha", "b": "beta", "rc": "rc", ".dev": "dev"}


class VersionError(ValueError):
    pass


def to_pep440(version: str) -> str:
    """The PEP 440 form of a SemVer 2 version (a PEP 440 version we would write passes as is)."""
    if _PEP440.match(version) and not SEMVER.match(version):
        return version
    m = SEMVER.match(version)
    if m is None:
        raise VersionError(
            f"{version!r} is not a SemVer 2 version (MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD], "
            "no leading zeros)"
        )
    out = m["core"]
    if m["pre"] is not None:
        pre = _PRE.match(m["pre"])
        phase = _PHASES.get(pre["phase"].lower()) if pre else None
        if pre is None or phase is None:
            raise VersionError(
                f"{version!r}: the pre-release {m['pre']!r} has no PEP 440 form for the wheel; "
                "use alpha.N, beta.N, rc.N or dev.N (or a.N, b.N, rcN)"
            )
        out += f"{phase}{pre['n'] or 0}"
    if m["build"] is not None:
        out += "+" + m["build"].replace("-", ".")
    return out


def to_semver(version: str) -> str:
    """The SemVer 2 form of a version: a SemVer one as is, a PEP 440 one we write converted."""
    if SEMVER.match(version):
        return version
    m = _PEP440.match(version)
    if m is None:
        raise VersionError(
            f"{version!r} is neither SemVer 2 nor a PEP 440 version of the forms "
            "X.Y.Z, X.Y.Z{a,b,rc}N, X.Y.Z.devN"
        )
    out = m["core"]
    if m["phase"]:
        out += f"-{_BACK[m['phase']]}.{m['n']}"
    if m["local"]:
        out += "+" + m["local"]
    return out


def project_version(root: Path = ROOT) -> str:
    """``[project] version`` of pyproject.toml, as written."""
    with (root / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--pep440", metavar="VERSION")
    group.add_argument("--semver", metavar="VERSION")
    args = parser.parse_args(argv)
    try:
        if args.pep440 is not None:
            print(to_pep440(args.pep440))
        else:
            print(to_semver(args.semver if args.semver is not None else project_version()))
    except VersionError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
