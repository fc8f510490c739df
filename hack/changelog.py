"""One version's section of CHANGELOG.md, as the release notes (``dist/RELEASE.md``).

``python hack/changelog.py VERSION [--out FILE]``: the section ``## [VERSION] …`` up to the next
``## [``. A pre-release (``1.2.0-rc.1``) without a section of its own takes its release's
(``1.2.0``). No section for the version is an error: a release has notes, or it is not made.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\](?P<rest>.*)$")


class ChangelogError(ValueError):
    pass


def sections(text: str) -> dict[str, list[str]]:
    """version -> its section's lines, heading included."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        m = HEADING.match(line)
        if m:
            current = out.setdefault(m["version"], [])
        elif line.startswith("## "):
            current = None
        if current is not None:
            current.append(line)
    return out


def section(text: str, version: str) -> str:
    found = sections(text)
    core = re.split(r"[-+]", version, maxsplit=1)[0]
    for key in (version, core):
        if key in found:
            lines = found[key]
            if key != version:
                lines = [f"## [{version}] (from the notes of {key})", *lines[1:]]
            return "\n".join(lines).strip() + "\n"
    raise ChangelogError(
        f"CHANGELOG.md has no section '## [{version}]'"
        + (f" nor '## [{core}]'" if core != version else "")
        + f" (it has: {', '.join(found) or 'none'}): write the release's notes first"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version")
    parser.add_argument("--changelog", type=Path, default=ROOT / "CHANGELOG.md")
    parser.add_argument("--out", type=Path, help="write here (default: print)")
    args = parser.parse_args(argv)
    try:
        text = section(args.changelog.read_text(), args.version)
    except ChangelogError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
