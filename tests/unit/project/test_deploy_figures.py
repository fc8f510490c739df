"""docs/deploy.md's image size, import time and start-up RSS are the committed JSON's
(bench/results/image.json, image-arm64.json and startup.json), not figures typed by hand that
a new measurement would leave behind."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "docs" / "deploy.md"
RESULTS = ROOT / "bench" / "results"


def _json(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((RESULTS / name).read_text())
    return loaded


def test_the_image_sizes_in_the_docs_are_the_committed_reports() -> None:
    text = DEPLOY.read_text()
    amd64 = _json("image.json")
    assert (
        f"{amd64['compressed_mb']} MB compressed (what a node pulls), "
        f"{amd64['uncompressed_mb']} MB unpacked, from {amd64['debian_packages']} Debian "
        f"packages and {amd64['wheels']} wheels"
    ) in " ".join(text.split())
    arm64 = _json("image-arm64.json")
    assert (
        f"{arm64['compressed_mb']} MB compressed, {arm64['uncompressed_mb']} MB unpacked"
        in " ".join(text.split())
    )


def _row(text: str, label: str) -> list[str]:
    (line,) = [x for x in text.splitlines() if x.startswith(f"| {label} |")]
    return [c.strip() for c in line.strip("|").split("|")][1:]


def test_the_footprint_table_is_the_committed_startup_report() -> None:
    text = DEPLOY.read_text()
    runs = _json("startup.json")
    columns = [runs[k] for k in ("before", "after", "after_with_tracing")]

    def mb(b: float) -> str:
        return f"{b / 1e6:.0f} MB"

    expected = {
        "distributions installed": [str(c["distributions"]) for c in columns],
        "site-packages": [mb(c["site_packages_bytes"]) for c in columns],
        "`import agentsandbox.cli.controller`, wall": [
            f"{c['import_s'] * 1000:.0f} ms" for c in columns
        ],
        "the same, `-X importtime`": [f"{c['importtime_us'] / 1000:.0f} ms" for c in columns],
        "peak RSS of `--help`": [f"{c['rss_help_kib'] / 1024:.1f} MiB" for c in columns],
        "RSS once `/readyz` is OK": [f"{c['rss_ready_kib'] / 1024:.1f} MiB" for c in columns],
        "start to `/readyz` OK": [f"{c['ready_s']:.2f} s" for c in columns],
    }
    for label, cells in expected.items():
        assert _row(text, label) == cells, label
    # the table says how many runs each median is of
    assert re.search(rf"medians of {columns[1]['runs']} runs", " ".join(text.split()))
