"""kube/_kaconfig.py: the kubeconfig loader without kubernetes_asyncio's generated API client."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "http://127.0.0.1:6443"}
users:
- name: u
  user: {token: abc}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
"""


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,  # only stops a hung run
    )
    return out.stdout.strip()


def test_config_module_does_not_load_the_generated_client(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    out = _run(
        f"""
        import asyncio, sys
        from agentsandbox.kube.config import load_kubeconfig
        cfg = asyncio.run(load_kubeconfig({str(path)!r}))
        print(cfg.host, asyncio.run(cfg.auth.header()))
        print(sorted(m for m in sys.modules if m.startswith("kubernetes_asyncio.client.")))
        print("kubernetes_asyncio" in sys.modules)
        """
    )
    host_line, modules, parent = out.splitlines()
    assert host_line == "http://127.0.0.1:6443 Bearer abc"
    assert "models" not in modules and "api_client" not in modules
    assert "kubernetes_asyncio.client.configuration" in modules
    assert parent == "False"  # the stand-in parent package was removed again


def test_a_later_full_import_shares_the_configuration_class() -> None:
    out = _run(
        """
        from agentsandbox.kube import config as ours
        import kubernetes_asyncio
        from kubernetes_asyncio.client import Configuration, V1Pod
        from kubernetes_asyncio.config import kube_config
        print(Configuration is ours.Configuration, kubernetes_asyncio.config is ours.ka_config)
        import asyncio

        async def main():
            api = kube_config.ApiClient(configuration=Configuration())
            print(type(api).__name__, V1Pod.__name__)
            await api.close()

        asyncio.run(main())
        """
    )
    assert out.splitlines() == ["True True", "ApiClient V1Pod"]


def test_an_earlier_full_import_is_used_as_it_is() -> None:
    out = _run(
        """
        import kubernetes_asyncio.client
        from agentsandbox.kube import config as ours
        print(ours.Configuration is kubernetes_asyncio.client.Configuration)
        """
    )
    assert out == "True"
