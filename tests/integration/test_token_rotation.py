"""A rotated in-cluster ServiceAccount token file authenticates, against the real kube-apiserver.

``load_incluster_config`` is built on kubernetes_asyncio's ``InClusterConfigLoader``, whose
``refresh_api_key_hook`` re-reads the token file once its ``token_expires_at`` (read time + one
minute) has passed. Rather than wait a minute, the test moves that deadline into the past: it
advances the loader's clock; the tokens, the file and the API server are all real.
"""

from __future__ import annotations

import asyncio
import datetime
import time
import types
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader

from agentsandbox.kube.client import Client
from agentsandbox.kube.config import ClusterConfig, load_incluster_config, load_kubeconfig
from agentsandbox.kube.errors import NotFound, Unauthorized
from agentsandbox.kube.resources import SERVICEACCOUNTS

from .auth_helpers import ca_file, service_account_token, whoami


@pytest.fixture
async def admin(kubeconfig: str) -> AsyncIterator[Client]:
    async with Client(await load_kubeconfig(kubeconfig), qps=0) as c:
        yield c


def token_loader(cfg: ClusterConfig) -> InClusterConfigLoader:
    """The library's loader, held by the closure of the refresh hook it installed."""
    assert cfg.configuration is not None
    hook = cfg.configuration.refresh_api_key_hook
    assert isinstance(hook, types.FunctionType), f"no token refresh hook installed: {hook!r}"
    for cell in hook.__closure__ or ():
        if isinstance(cell.cell_contents, InClusterConfigLoader):
            return cell.cell_contents
    raise AssertionError("the refresh hook does not hold an InClusterConfigLoader")


def advance_past_refresh(loader: InClusterConfigLoader) -> None:
    """Move the loader's re-read deadline into the past: the next request re-reads the file."""
    deadline = loader.token_expires_at
    now = datetime.datetime.now()
    # the library's contract: the file is re-read only once a minute
    assert deadline - now > datetime.timedelta(seconds=50), deadline - now
    loader.token_expires_at = now - datetime.timedelta(seconds=1)


async def test_a_rotated_token_file_is_picked_up_and_a_revoked_one_is_unauthorized(
    admin: Client,
    namespace: str,
    kubeconfig: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started = time.monotonic()
    token_a = await service_account_token(admin, namespace, "sa-a")
    token_b = await service_account_token(admin, namespace, "sa-b")
    token_c = await service_account_token(
        admin, namespace, "sa-c"
    )  # never used: no authn cache entry
    token_file = tmp_path / "token"
    token_file.write_text(token_a)
    host, port = admin.host.split("://", 1)[1].rsplit(":", 1)
    assert host == "127.0.0.1"
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    cfg = load_incluster_config(
        token_filename=str(token_file), cert_filename=ca_file(kubeconfig, tmp_path)
    )
    loader = token_loader(cfg)

    async with Client(cfg) as c:
        assert await whoami(c) == f"system:serviceaccount:{namespace}:sa-a"

        # the kubelet rotates the projected token in place
        token_file.write_text(token_b)
        # within the refresh period the token read at start-up is still sent
        assert await whoami(c) == f"system:serviceaccount:{namespace}:sa-a"
        advance_past_refresh(loader)
        assert await whoami(c) == f"system:serviceaccount:{namespace}:sa-b"
        assert await whoami(c) == f"system:serviceaccount:{namespace}:sa-b"

        # a revoked token: its ServiceAccount is gone, so the bound token no longer authenticates
        existing = await admin.get(SERVICEACCOUNTS, "sa-c", namespace)
        await admin.delete(SERVICEACCOUNTS, "sa-c", namespace)
        with pytest.raises(NotFound):
            await admin.get(SERVICEACCOUNTS, "sa-c", namespace)

        # the API server's own ServiceAccount cache follows a watch: wait until one saw the delete
        async def delete_watched() -> None:
            since = existing["metadata"]["resourceVersion"]
            async with admin.watch(SERVICEACCOUNTS, namespace, resource_version=since) as events:
                async for ev in events:
                    if ev.type == "DELETED" and ev.object["metadata"]["name"] == "sa-c":
                        return

        await asyncio.wait_for(delete_watched(), 5)
        token_file.write_text(token_c)
        advance_past_refresh(loader)
        with pytest.raises(Unauthorized) as revoked:
            await whoami(c)
        assert revoked.value.status == 401 and "\n" not in str(revoked.value)

        # garbage in the file: a typed, one-line Unauthorized as well
        token_file.write_text("not-a-service-account-token")
        advance_past_refresh(loader)
        with pytest.raises(Unauthorized) as garbage:
            await whoami(c)
        assert garbage.value.status == 401 and "\n" not in str(garbage.value)
    assert time.monotonic() - started < 10


async def test_a_401_makes_the_client_reread_a_rotated_token_file_at_once(
    admin: Client,
    namespace: str,
    kubeconfig: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The file was rotated after the client read it: the first request gets a 401, the client
    re-reads the file at once (as client-go does) and the retry succeeds — no minute's wait."""
    token_b = await service_account_token(admin, namespace, "sa-rotated")
    token_file = tmp_path / "token"
    token_file.write_text("an-expired-token-from-before-the-rotation")
    host, port = admin.host.split("://", 1)[1].rsplit(":", 1)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    cfg = load_incluster_config(
        token_filename=str(token_file), cert_filename=ca_file(kubeconfig, tmp_path)
    )
    loader = token_loader(cfg)
    assert loader.token_expires_at - datetime.datetime.now() > datetime.timedelta(seconds=50)
    token_file.write_text(token_b)
    async with Client(cfg) as c:
        assert await whoami(c) == f"system:serviceaccount:{namespace}:sa-rotated"
