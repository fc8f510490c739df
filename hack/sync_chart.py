"""Write what the Helm chart and deploy/ take from elsewhere: deploy/crds/ copied into
deploy/helm/agent-sandbox/files/crds/ and deploy/monitoring/ into files/monitoring/ (copies, not
links, so that `helm package` and any checkout carry them), and the controller's version,
pyproject.toml's (the one place it is written) as SemVer, into the chart's ``appVersion`` (its
default image tag) and deploy/controller.yaml's image tag. ``--check`` writes nothing and exits
1 when a file differs (tests/unit/project/test_chart_files.py runs it)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from semver import project_version, to_semver

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "agent-sandbox"
SOURCES = {
    ROOT / "deploy" / "crds": CHART / "files" / "crds",
    ROOT / "deploy" / "monitoring": CHART / "files" / "monitoring",
}
# the one line of each file that holds the controller's version: (pattern, its replacement)
VERSIONED = {
    CHART / "Chart.yaml": (r"^appVersion: .*$", 'appVersion: "{version}"'),
    ROOT / "deploy" / "controller.yaml": (
        r"^(?P<indent> +)image: (?P<repo>agentsandbox/agent-sandbox-controller):[^\s@]+$",
        "{indent}image: {repo}:{tag}",
    ),
}


def versioned() -> dict[Path, str]:
    """The files of VERSIONED as they should be: their version line set to pyproject's."""
    version = to_semver(project_version(ROOT))
    # an image tag has no `+`: as hack/release.py writes it
    fields = {"version": version, "tag": version.replace("+", "_")}
    want = {}
    for path, (pattern, line) in VERSIONED.items():

        def repl(m: re.Match[str], line: str = line) -> str:
            return line.format(**fields, **m.groupdict())

        new, n = re.subn(pattern, repl, path.read_text(), flags=re.MULTILINE)
        if n != 1:
            raise SystemExit(f"{path}: {n} lines match {pattern!r}, want one")
        want[path] = new
    return want


def drift() -> list[str]:
    """The copies that differ from their source, are missing, or have no source, and the files
    whose controller version is not pyproject.toml's."""
    wrong = []
    for src, dst in SOURCES.items():
        want = {p.name: p.read_bytes() for p in sorted(src.iterdir()) if p.is_file()}
        have = {p.name: p.read_bytes() for p in sorted(dst.iterdir()) if p.is_file()}
        wrong += [str(dst / n) for n in sorted(set(want) | set(have)) if want.get(n) != have.get(n)]
    wrong += [str(path) for path, text in versioned().items() if path.read_text() != text]
    return wrong


def sync() -> None:
    for src, dst in SOURCES.items():
        dst.mkdir(parents=True, exist_ok=True)
        for old in dst.iterdir():
            if not (src / old.name).is_file():
                old.unlink()
        for p in src.iterdir():
            if p.is_file():
                (dst / p.name).write_bytes(p.read_bytes())
    for path, text in versioned().items():
        if path.read_text() != text:
            path.write_text(text)


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        wrong = drift()
        for path in wrong:
            print(f"{path}: differs from its source; run `python hack/sync_chart.py`")
        return 1 if wrong else 0
    sync()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
