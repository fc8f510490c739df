"""The repository stands on its own: nothing it says points outside it, and every repository path
that the docs name in backticks exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCANNED = ["src", "tests", "bench", "hack", "docs", "deploy", "README.md"]

# Written in pieces so that this file does not match itself.
FORBIDDEN = [
    "\u00a7",  # a section sign: a section of a document that is not here
    "spec " + "core",
    "spec " + "extensions",
    "the " + "seed",
    "seed" + "'s",
    "../" + "shared",
]
# absolute paths of a developer's machine (not /tmp: defaults such as a webhook's cert dir), and
# a path built to a sibling directory of the checkout named like the reference material
MACHINE_PATH = re.compile(
    r"(?<![\w.~-])/(?:" + "work|root|home|Users" + r")/|parent\s*/\s*[\"']" + "shared" + "[\"']"
)

TOP_LEVEL = ("src/", "tests/", "bench/", "hack/", "docs/", "deploy/", "clients/", ".ci/")
TOP_FILES = {"Makefile", "README.md", "pyproject.toml", "Dockerfile", "requirements-dev.lock"}
BACKTICKED = re.compile(r"`([^`\s]+)`")


def files(*paths: str) -> list[Path]:
    """The files under ``paths`` that git tracks or would track (ignored build output is not)."""
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "--", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    return [ROOT / p for p in out if p and (ROOT / p).is_file()]


def offending_lines(text: str) -> list[tuple[int, str]]:
    hits = []
    for number, line in enumerate(text.splitlines(), 1):
        low = line.lower()
        if any(word in low for word in FORBIDDEN) or MACHINE_PATH.search(line):
            hits.append((number, line.strip()))
    return hits


def test_nothing_points_outside_the_repository() -> None:
    bad = []
    for path in files(*SCANNED):
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in offending_lines(text):
            bad.append(f"{path.relative_to(ROOT)}:{number}: {line[:140]}")
    assert not bad, "references outside the repository:\n" + "\n".join(bad)


def test_the_scan_catches_each_kind_of_outside_reference() -> None:
    lines = [
        "see spec " + "CORE \u00a72.4",
        "as spec " + "Extensions says",
        "The " + "Seed says so",
        "the " + "seed" + "'s rule",
        "in ../" + "shared/x.md",
        "/" + "work/main/src",
        "/" + "home/me/x",
        "UPSTREAM = ROOT.parent / " + '"shared"' + ' / "upstream"',
    ]
    assert [n for n, _ in offending_lines("\n".join(lines))] == list(range(1, len(lines) + 1))
    fine = "random seed 1\n/tmp/k8s-webhook-server/serving-certs\n~/.cache/x\nsrc/work/x"
    assert offending_lines(fine) == []


def repository_paths(text: str) -> list[str]:
    """The backticked words that name a path in this repository: a test id's ``::name``, a
    ``:line`` suffix and an ``#anchor`` dropped, ``{a,b}`` expanded; a word with a ``<placeholder>``
    names no one path and is passed over."""
    out = []
    for word in BACKTICKED.findall(text):
        if not (word.startswith(TOP_LEVEL) or word in TOP_FILES) or "<" in word:
            continue
        word = word.split("::", 1)[0].split("#", 1)[0]
        word = re.sub(r":\d+(-\d+)?$", "", word)
        brace = re.search(r"\{([^{}]*)\}", word)
        if brace:
            head, tail = word[: brace.start()], word[brace.end() :]
            out += [head + alt + tail for alt in brace[1].split(",")]
        else:
            out.append(word)
    return out


def exists(path: str) -> bool:
    if any(ch in path for ch in "*?["):
        return any(ROOT.glob(path))
    return (ROOT / path.rstrip("/")).exists()


def test_every_backticked_repository_path_in_the_docs_exists() -> None:
    missing = []
    for doc in files("docs", "README.md"):
        if doc.suffix != ".md":
            continue
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for path in repository_paths(line):
                if not exists(path):
                    missing.append(f"{doc.relative_to(ROOT)}:{number}: {path}")
    assert not missing, "docs name paths that do not exist:\n" + "\n".join(missing)


def test_the_path_check_reads_test_ids_and_line_numbers() -> None:
    text = (
        "`tests/unit/x.py::test_a` and `src/a.py:12` and `make test` and `Makefile` and "
        "`docs/a.md#part` and `src/{b,c}.py` and `bench/results/<P>.json`"
    )
    assert repository_paths(text) == [
        "tests/unit/x.py",
        "src/a.py",
        "Makefile",
        "docs/a.md",
        "src/b.py",
        "src/c.py",
    ]
    assert exists("Makefile") and not exists("src/no-such-module.py")
