"""P1's cross-check: warm-claim latency as the released 1.0.x client measures it.

Run by ``.venv-sdk108/bin/python`` (the hash-locked venv of ``k8s-agent-sandbox==1.0.8``, made by
``make sdk-venvs``), never by the project's venv. Creates ``--count`` sandboxes one after another
with ``SandboxClient.create_sandbox(<pool>)`` (claim → the claim's Ready, as the client waits in
production), times each call, terminates each (the claim is deleted), and prints ONE JSON line:
``{"sdk": "1.0.8", "create_ms": [...]}``. The client talks to the apiserver through the given
kubeconfig and to the runtime only through ``SandboxDirectConnectionConfig`` (a stand-in on
127.0.0.1); both must be loopback addresses, as in tests/integration/sdk_driver.py.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))

from sdk_driver import fail, isolate_environment, kubeconfig_server, loopback


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--api-url", required=True)
    p.add_argument("--warm-pool", required=True)
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--pause", type=float, default=0.1, help="seconds between claims")
    args = p.parse_args()
    if not loopback(args.api_url) or not loopback(kubeconfig_server(args.kubeconfig)):
        fail("the runtime URL and the kubeconfig's server must be loopback addresses", 2)
    isolate_environment(args.kubeconfig)
    from k8s_agent_sandbox import SandboxClient
    from k8s_agent_sandbox.models import SandboxDirectConnectionConfig

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, force=True)
    client = SandboxClient(connection_config=SandboxDirectConnectionConfig(api_url=args.api_url))
    times: list[float] = []
    for _ in range(args.count):
        t = time.monotonic()
        sandbox = client.create_sandbox(
            args.warm_pool, namespace=args.namespace, sandbox_ready_timeout=60
        )
        times.append(round((time.monotonic() - t) * 1000, 1))
        sandbox.terminate()
        time.sleep(args.pause)
    sdk = importlib.metadata.version("k8s-agent-sandbox")
    print(json.dumps({"sdk": sdk, "create_ms": times}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
