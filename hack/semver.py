"""A release's version: SemVer 2 for the chart and the image, its PEP 440 form for the wheel.

The one place the version is written is ``pyproject.toml`` (``[project] version``, which hatchling
requires in PEP 440 form); ``make release VERSION=…`` overrides it for one build with any SemVer 2
version, pre-releases included (semver.org's grammar: numeric identifiers without leading zeros,
alphanumeric ones with hyphens, build metadata). Every one has a PEP 440 form:

====================================  ==========================
SemVer 2                              PEP 440
====================================  ==========================
``1.2.0``                             ``1.2.0``
``1.2.0-alpha.3``, ``-a.3``             ``1.2.0a3``
``1.2.0-beta.2``, ``-b2``               ``1.2.0b2``
``1.2.0-rc.1``, ``-rc1``                ``1.2.0rc1``
``1.2.0-rc``                          ``1.2.0rc0``
``1.2.0-dev.4``                       ``1.2.0.dev4``
``1.2.0-rc.1+build.7``                ``1.2.0rc1+build.7``
``1.2.0-foo``, ``-0.3.7``, ``-rc.x``    ``1.2.0.dev0+foo``, ``+0.3.7``, ``+rc.x``
``1.0.0-alpha.beta+exp.sha.5114f85``  ``1.0.0.dev0+alpha.beta.exp.sha.5114f85``
``1.0.0-alpha+001``                   ``1.0.0a0+1``
====================================  ==========================

A pre-release of one phase (alpha, a, beta, b, rc, c, dev) and an optional number keeps its
phase; any other pre-release becomes ``X.Y.Z.dev0`` (below the release, and below its alpha, beta
and rc forms) with its identifiers as the local version label. The build metadata ``+…`` is
appended to that label. The label is in PEP 440's normal form: lower case, ``-`` as ``.``
(empty parts dropped), numbers without leading zeros; so some SemVer versions that differ only
there share a PEP 440 form.

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
            f"{version!r} is not a SemVer 2 version: MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD], "
            "PRERELEASE and BUILD dot-separated non-empty identifiers of [0-9A-Za-z-]; "
            "MAJOR, MINOR, PATCH and numeric PRERELEASE identifiers with no leading zeros"
        )
    out = m["core"]
    local: list[str] = []
    if m["pre"] is not None:
        pre = _PRE.match(m["pre"])
        phase = _PHASES.get(pre["phase"].lower()) if pre else None
        if pre is not None and phase is not None:
            out += f"{phase}{pre['n'] or 0}"
        else:
            out += ".dev0"
            local += _local_parts(m["pre"])
    if m["build"] is not None:
        local += _local_parts(m["build"])
    return out + ("+" + ".".join(local) if local else "")


def _local_parts(identifiers: str) -> list[str]:
    """SemVer identifiers as parts of a PEP 440 local version label, in its normal form."""
    parts = [p.lower() for p in re.split(r"[.-]", identifiers) if p]
    return [str(int(p)) if p.isdigit() else p for p in parts]


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
