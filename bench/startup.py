"""The controller's footprint as a user gets it: one wheel installed into a clean virtualenv.

For a source tree (the checkout, or ``--source`` for another one such as a ``git archive`` of an
earlier commit) this builds the wheel, installs it offline from .wheelhouse/ (``make venv``) into a
fresh virtualenv and measures:

- ``site_packages_bytes`` / ``distributions``: what the install puts on disk;
- ``import_s``: wall time of ``python -c 'import agentsandbox.cli.controller'`` (the console
  command's module), the median of ``--runs`` runs;
- ``importtime_us``: ``python -X importtime``'s cumulative time of that module, median;
- ``rss_help_kib``: the peak RSS of ``agent-sandbox-controller --help`` (``wait4``), median;
- ``rss_ready_kib`` (with ``--cluster``): the controller's VmRSS once ``/readyz`` answers OK
  against a local control plane started for the purpose (one node), median over ``--runs``
  starts.

The result is merged into ``--out`` under ``--label`` (``before``/``after``), so that the same
script measures both sides of a change. Every number is from this machine; compare within a file.
The committed ``bench/results/startup.json`` came from the commands of ``COMMAND`` below (with
``--note`` saying which tree each label measured).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from results import git_state  # noqa: E402

COMMAND = (
    "git archive <the commit before> | tar -x -C /tmp/before; "
    "python bench/startup.py --label before --source /tmp/before --cluster --runs 9; "
    "python bench/startup.py --label after --cluster --runs 9; "
    "python bench/startup.py --label after_with_tracing --extras tracing --cluster --runs 9"
)
WHEELHOUSE = ROOT / ".wheelhouse"
MODULE = "agentsandbox.cli.controller"


def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env.pop("KUBECONFIG", None)
    return env | {"PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull}


def install(source: Path, work: Path, extras: str) -> Path:
    dist = work / "dist"
    run(sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(dist), ".",
        cwd=source)  # fmt: skip
    (wheel,) = dist.glob("agentsandbox-*.whl")
    venv = work / "venv"
    env = clean_env()
    run(sys.executable, "-m", "venv", str(venv), env=env)
    target = f"{wheel}[{extras}]" if extras else str(wheel)
    run(str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-index", "--find-links",
        str(WHEELHOUSE), target, env=env)  # fmt: skip
    return venv


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def site_packages(venv: Path) -> Path:
    (sp,) = venv.glob("lib/python*/site-packages")
    return sp


def peak_rss_kib(argv: list[str], env: dict[str, str]) -> int:
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv}: exit {proc.returncode}")
    return int(usage.ru_maxrss)  # KiB on Linux


def importtime_us(python: Path, env: dict[str, str]) -> int:
    proc = subprocess.run(
        [str(python), "-X", "importtime", "-c", f"import {MODULE}"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    for line in proc.stderr.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2] == MODULE:
            return int(parts[1])
    raise SystemExit(f"{MODULE} not in -X importtime output")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def local_cluster() -> Iterator[Path]:
    sys.path.insert(0, str(ROOT / "src"))
    from agentsandbox.devcluster.cluster import DevCluster

    cluster = DevCluster(
        Path(tempfile.mkdtemp(prefix="agentsandbox-startup-")),
        nodes=1,
        crd_paths=[ROOT / "deploy" / "crds"],
    )
    cluster.start()
    try:
        yield cluster.kubeconfig
    finally:
        cluster.stop(keep_logs=False)


def ready_rss_kib(venv: Path, kubeconfig: Path, env: dict[str, str]) -> tuple[int, float]:
    probes = free_port()
    argv = [
        str(venv / "bin/agent-sandbox-controller"),
        f"--kubeconfig={kubeconfig}",
        "--extensions",
        "--leader-elect=false",
        f"--metrics-bind-address=127.0.0.1:{free_port()}",
        f"--health-probe-bind-address=127.0.0.1:{probes}",
    ]
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the controller exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{probes}/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - start > 120:
                raise SystemExit("the controller was not ready within 120 s")
            time.sleep(0.1)
        took = time.monotonic() - start
        status = Path(f"/proc/{proc.pid}/status").read_text()
        (line,) = [x for x in status.splitlines() if x.startswith("VmRSS:")]
        return int(line.split()[1]), took
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def measure(source: Path, runs: int, cluster: bool, extras: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentsandbox-startup-") as tmp:
        work = Path(tmp)
        venv = install(source, work, extras)
        python = venv / "bin/python"
        env = clean_env()
        sp = site_packages(venv)
        dists = sorted(p.name.split("-")[0] for p in sp.glob("*.dist-info"))
        walls = []
        for _ in range(runs):
            t0 = time.perf_counter()
            run(str(python), "-c", f"import {MODULE}", env=env)
            walls.append(time.perf_counter() - t0)
        out: dict[str, Any] = {
            "extras": extras,
            "distributions": len(dists),
            "distribution_names": dists,
            "site_packages_bytes": tree_bytes(sp),
            "import_s": round(statistics.median(walls), 4),
            "importtime_us": int(
                statistics.median(importtime_us(python, env) for _ in range(runs))
            ),
            "rss_help_kib": int(
                statistics.median(
                    peak_rss_kib([str(venv / "bin/agent-sandbox-controller"), "--help"], env)
                    for _ in range(runs)
                )
            ),
        }
        if cluster:
            with local_cluster() as kubeconfig:
                samples = [ready_rss_kib(venv, kubeconfig, env) for _ in range(runs)]
            out["rss_ready_kib"] = int(statistics.median(s[0] for s in samples))
            out["ready_s"] = round(statistics.median(s[1] for s in samples), 2)
        return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="the key in --out, e.g. before or after")
    parser.add_argument("--source", type=Path, default=ROOT, help="the source tree to build")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--extras", default="", help="extras to install with the wheel")
    parser.add_argument("--cluster", action="store_true", help="also the RSS once ready")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/startup.json")
    parser.add_argument("--note", default="", help="what was measured (e.g. the source commit)")
    args = parser.parse_args()
    if not (WHEELHOUSE / ".complete").is_file():
        raise SystemExit("no .wheelhouse/: run `make venv`")
    result = measure(args.source.resolve(), args.runs, args.cluster, args.extras)
    result |= {
        "note": args.note,
        "runs": args.runs,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }
    result["command"] = shlex.join(["python", "bench/startup.py", *sys.argv[1:]])
    data = json.loads(args.out.read_text()) if args.out.exists() else {}
    data[args.label] = result
    # how the file was made (tests/unit/project/test_reports.py): the whole sequence, and where
    data["command"] = COMMAND
    data["machine"] = git_state() | {"python": platform.python_version(), "cpus": os.cpu_count()}
    args.out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(json.dumps({args.label: result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
