"""``make cluster`` / ``make cluster-down``: a local control plane left running in the background.

State, PIDs and logs live in ``.cluster/`` (or ``--dir``); ``.cluster/kubeconfig`` is the admin
kubeconfig and ``.cluster/bin/kubectl`` the version-matched kubectl.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from agentsandbox.devcluster.binaries import BinariesError, repo_root
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.devcluster.process import ClusterStartError


def _default_dir() -> Path:
    root = repo_root()
    return (root if root is not None else Path.cwd()) / ".cluster"


def _crd_paths() -> list[Path]:
    root = repo_root()
    crds = root / "deploy" / "crds" if root is not None else None
    return [crds] if crds is not None and crds.is_dir() else []


def up(workdir: Path, nodes: int) -> int:
    existing = DevCluster.attach(workdir)
    if existing is not None:
        if existing.healthy():
            print(f"cluster already running: {existing.server} (kubeconfig {existing.kubeconfig})")
            return 0
        print("found a stale cluster in", workdir, "- cleaning it up", file=sys.stderr)
        existing.stop()
    if workdir.exists():
        shutil.rmtree(workdir)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    cluster = DevCluster(workdir, nodes=nodes, crd_paths=_crd_paths())
    t0 = time.monotonic()
    try:
        cluster.start()
    except (ClusterStartError, BinariesError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; every started process was stopped", file=sys.stderr)
        return 130
    bindir = workdir / "bin"
    bindir.mkdir(exist_ok=True)
    link = bindir / "kubectl"
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(cluster.kubectl_path, link)
    print(
        f"cluster ready in {time.monotonic() - t0:.1f}s: {cluster.server}, {nodes} kwok nodes\n"
        f"  kubeconfig: {cluster.kubeconfig}\n"
        f"  kubectl:    {link} --kubeconfig {cluster.kubeconfig} get nodes\n"
        f"  logs:       {cluster.logs}\n"
        f"  stop with:  make cluster-down"
    )
    return 0


def down(workdir: Path) -> int:
    cluster = DevCluster.attach(workdir)
    if cluster is None:
        print("no cluster running in", workdir)
        return 0
    cluster.stop()
    left = [c.name for c in cluster.components.values() if c.alive()]
    if left:
        print("error: still running:", ", ".join(left), file=sys.stderr)
        return 1
    print("cluster stopped; logs kept in", cluster.logs)
    return 0


def status(workdir: Path) -> int:
    cluster = DevCluster.attach(workdir)
    if cluster is None:
        print("no cluster")
        return 1
    for name, comp in cluster.components.items():
        print(f"{name:24} pid {comp.pid:<8} {'running' if comp.alive() else 'STOPPED'}")
    ok = cluster.healthy()
    print("apiserver", "ready" if ok else "NOT ready", cluster.server)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentsandbox-devcluster", description=__doc__)
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--dir", type=Path, default=None, help="state directory (.cluster)")
    parser.add_argument("--nodes", type=int, default=10, help="fake kwok nodes (default 10)")
    args = parser.parse_args(argv)
    workdir = (args.dir or _default_dir()).resolve()
    if args.command == "up":
        return up(workdir, args.nodes)
    if args.command == "down":
        return down(workdir)
    return status(workdir)


if __name__ == "__main__":
    sys.exit(main())
