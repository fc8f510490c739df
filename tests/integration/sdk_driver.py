"""Drive a released ``k8s-agent-sandbox`` client (0.4.6 or 1.0.8), unchanged, end to end.

Run by one of the SDK venvs' Python (``.venv-sdk046/bin/python``, ``.venv-sdk108/bin/python``),
never by the project's venv: it imports only the SDK and the standard library (plus the SDK's own
dependency PyYAML). One run: create a sandbox (claim → ready), run ``echo hello``, write a file and
read it back, terminate (the claim is deleted), then print ONE JSON line on stdout::

    {"sdk": "0.4.6", "claim": ..., "sandbox": ..., "stdout": "hello\\n", "exit_code": 0,
     "file_path": ..., "file_content": ..., "file_exists": true, "cat": ...,
     "timings": {"create_s": ..., "execute_s": ..., "files_s": ..., "terminate_s": ...,
                 "total_s": ...}}

The client connects ONLY through ``SandboxDirectConnectionConfig(api_url=<stand-in>)``: never
in-cluster, pod-IP, tunnel or gateway modes (kwok's pod IPs are fictitious). The api URL and the
kubeconfig's server must both be loopback addresses, or the driver refuses to start.

    sdk_driver.py --kubeconfig PATH --namespace NS --api-url http://127.0.0.1:PORT
                  [--ready-timeout 60]
                  (--template TPL [--warmpool POLICY]     # 0.4.6: POLICY = none | default | <pool>
                   | --warm-pool POOL)                    # 1.0.8

Exit status: 0 on success; 1 if a step failed (message on stderr, the claim is deleted);
2 for bad arguments.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import ipaddress
import json
import logging
import os
import sys
import time
import urllib.parse
from typing import Any, NoReturn

CONTENT = "written by k8s-agent-sandbox {sdk} into {sandbox}\n"


def fail(message: str, code: int = 1) -> NoReturn:
    print(f"sdk_driver: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def kubeconfig_server(path: str) -> str:
    import yaml  # a dependency of the SDK's kubernetes package

    with open(path) as fh:
        cfg = yaml.safe_load(fh)
    current = cfg.get("current-context")
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == current)
    return str(next(c["cluster"]["server"] for c in cfg["clusters"] if c["name"] == ctx["cluster"]))


def parse_args(sdk: str, argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="drive a released k8s-agent-sandbox client")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--api-url", required=True, help="the stand-in runtime, http://127.0.0.1:PORT")
    p.add_argument("--ready-timeout", type=int, default=60, help="sandbox_ready_timeout (s)")
    p.add_argument("--template", help="0.4.6: SandboxTemplate name")
    p.add_argument("--warmpool", help='0.4.6: warm pool policy ("none", "default" or a pool)')
    p.add_argument("--warm-pool", help="1.0.8: SandboxWarmPool name (spec.warmPoolRef)")
    args = p.parse_args(argv)
    if sdk.startswith("0."):
        if not args.template or args.warm_pool:
            p.error(f"k8s-agent-sandbox {sdk} needs --template (and optionally --warmpool)")
    elif not args.warm_pool or args.template or args.warmpool:
        p.error(f"k8s-agent-sandbox {sdk} needs --warm-pool only")
    if not loopback(args.api_url):
        p.error(f"--api-url {args.api_url} is not a loopback address")
    if not 0 < args.ready_timeout <= 600:
        p.error("--ready-timeout must be within (0, 600]")
    return args


def isolate_environment(kubeconfig: str) -> None:
    """Only the given kubeconfig; no in-cluster config; no proxy between us and 127.0.0.1."""
    os.environ["KUBECONFIG"] = kubeconfig
    for var in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        os.environ.pop(var, None)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        os.environ.pop(var, None)
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost,::1"


def run(sdk: str, args: argparse.Namespace) -> dict[str, Any]:
    from k8s_agent_sandbox import SandboxClient
    from k8s_agent_sandbox.models import SandboxDirectConnectionConfig

    # 0.4.6 configures the root logger to stdout on import: keep stdout for our one JSON line
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, force=True)

    legacy = sdk.startswith("0.")
    client = SandboxClient(connection_config=SandboxDirectConnectionConfig(api_url=args.api_url))
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        if legacy:
            sandbox = client.create_sandbox(
                args.template,
                namespace=args.namespace,
                sandbox_ready_timeout=args.ready_timeout,
                warmpool=args.warmpool,
            )
        else:
            sandbox = client.create_sandbox(
                args.warm_pool,
                namespace=args.namespace,
                sandbox_ready_timeout=args.ready_timeout,
            )
    except Exception as err:
        # both clients delete their auto-named claim themselves when create fails
        fail(
            f"create_sandbox failed after {time.monotonic() - t0:.1f}s: {type(err).__name__}: {err}"
        )
    timings["create_s"] = time.monotonic() - t0
    out: dict[str, Any] = {
        "sdk": sdk,
        "claim": sandbox.claim_name,
        "sandbox": sandbox.sandbox_id,
        "namespace": args.namespace,
    }
    # 0.4.6 uploads under basename(path); 1.0.8 keeps the relative path (parents created)
    path = "hello.txt" if legacy else "out/hello.txt"
    content = CONTENT.format(sdk=sdk, sandbox=sandbox.sandbox_id)
    step = "execute"
    try:
        t = time.monotonic()
        result = sandbox.commands.run("echo hello")
        timings["execute_s"] = time.monotonic() - t
        out.update(stdout=result.stdout, stderr=result.stderr, exit_code=result.exit_code)
        step = "files"
        t = time.monotonic()
        sandbox.files.write(path, content)
        read = sandbox.files.read(path)
        out.update(
            file_path=path,
            file_content=read.decode(),
            file_exists=sandbox.files.exists(path),
            cat=sandbox.commands.run(f"cat {path}").stdout,
        )
        timings["files_s"] = time.monotonic() - t
    except Exception as err:
        sandbox.terminate()
        fail(f"{step} failed on sandbox {sandbox.sandbox_id}: {type(err).__name__}: {err}")
    step = "terminate"
    t = time.monotonic()
    try:
        sandbox.terminate()
    except Exception as err:
        fail(f"terminate failed for claim {sandbox.claim_name}: {type(err).__name__}: {err}")
    timings["terminate_s"] = time.monotonic() - t
    timings["total_s"] = time.monotonic() - t0
    out["timings"] = {k: round(v, 3) for k, v in timings.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    try:
        sdk = importlib.metadata.version("k8s-agent-sandbox")
    except importlib.metadata.PackageNotFoundError:
        fail(f"k8s-agent-sandbox is not installed in {sys.prefix} (run: make sdk-venvs)", 2)
    args = parse_args(sdk, argv)
    try:
        server = kubeconfig_server(args.kubeconfig)
    except (OSError, KeyError, StopIteration, TypeError) as err:
        fail(f"cannot read the kubeconfig {args.kubeconfig}: {err!r}", 2)
    if not loopback(server):
        fail(f"the kubeconfig's server {server} is not a loopback address", 2)
    isolate_environment(args.kubeconfig)
    out = run(sdk, args)
    problems = []
    if out.get("exit_code") != 0 or out.get("stdout") != "hello\n":
        problems.append(f"echo hello gave {out.get('exit_code')!r} {out.get('stdout')!r}")
    if out.get("file_content") != CONTENT.format(sdk=sdk, sandbox=out["sandbox"]):
        problems.append(f"file read back as {out.get('file_content')!r}")
    print(json.dumps(out, sort_keys=True), flush=True)
    if problems:
        fail("; ".join(problems))
    return 0


if __name__ == "__main__":
    sys.exit(main())
