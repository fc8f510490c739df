"""``make demo``'s code path (``agentsandbox.cli.demo``) end to end at a small size, on the
session's control plane: the controller in its own process, a pool of 4 filled and scaled to 6
through ``/scale``, 3 warm and 2 cold claims, the tables and the plot (written to a temporary
directory). The test itself takes about 5 s (starting the controller process is most of it).
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

from rich.console import Console

from agentsandbox.cli import demo
from agentsandbox.devcluster.cluster import DevCluster


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_demo_fills_scales_serves_claims_and_plots(cluster: DevCluster, tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False, color_system=None)
    size = demo.Size(pool=4, scaled=6, warm_claims=3, cold_claims=2, claim_rate=20.0)
    before = {ns["metadata"]["name"] for ns in cluster.api("GET", "/api/v1/namespaces")["items"]}

    code = demo.show(console, cluster, size, tmp_path / "plots")

    text = out.getvalue()
    assert code == 0, text
    plot = tmp_path / "plots" / "warmpool.png"
    assert plot.is_file() and plot.stat().st_size > 10_000, text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {plot}" in text
    # every claim Ready and served as asked: 3 adopted from the pool, 2 created from the template
    rows = dict(
        re.findall(
            r"│ (warm|cold)\s+│ (?:pool member, adopted|new, from the template)\s+│\s+(\d+) │",
            text,
        )
    )
    assert rows == {"warm": "3", "cold": "2"}, text
    assert "served otherwise than asked" not in text
    assert re.search(r"│ fill 0 → Ready\s+│\s+4 │", text), text
    assert re.search(r"│ scale up → Ready\s+│\s+2 │", text), text
    assert re.search(r"was back at 6 Ready", text), text
    # what it started is gone: the controller process, and its namespace (deleted, or being so)
    found = re.search(r"started agent-sandbox-controller \(pid (\d+)", text)
    assert found is not None, text
    assert not _alive(int(found.group(1)))
    active = [
        n["metadata"]["name"]
        for n in cluster.api("GET", "/api/v1/namespaces")["items"]
        if n["metadata"]["name"].startswith("demo-")
        and n["metadata"]["name"] not in before
        and n["status"]["phase"] == "Active"
    ]
    assert active == []
