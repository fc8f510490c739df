"""Copy the files the Helm chart packages from their sources: deploy/crds/ into
deploy/helm/agent-sandbox/files/crds/ and deploy/monitoring/ into files/monitoring/ (copies, not
links, so that `helm package` and any checkout carry them). ``--check`` writes nothing and exits
1 when a copy differs (tests/unit/project/test_chart_files.py runs it)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "agent-sandbox"
SOURCES = {
    ROOT / "deploy" / "crds": CHART / "files" / "crds",
    ROOT / "deploy" / "monitoring": CHART / "files" / "monitoring",
}


def drift() -> list[str]:
    """The copies that differ from their source, are missing, or have no source."""
    wrong = []
    for src, dst in SOURCES.items():
        want = {p.name: p.read_bytes() for p in sorted(src.iterdir()) if p.is_file()}
        have = {p.name: p.read_bytes() for p in sorted(dst.iterdir()) if p.is_file()}
        wrong += [str(dst / n) for n in sorted(set(want) | set(have)) if want.get(n) != have.get(n)]
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
