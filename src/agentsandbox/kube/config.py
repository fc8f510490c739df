"""Connection settings for the API server, taken from kubernetes_asyncio's config loader.

Kubeconfig parsing, exec credential plugins, OIDC/GCP providers and in-cluster service-account
token rotation are not re-implemented here: ``kubernetes_asyncio.config`` loads them into a
``kubernetes_asyncio.client.Configuration``. This module turns that ``Configuration`` into what our
aiohttp client needs — a base URL, an :class:`ssl.SSLContext`, and an :class:`AuthProvider` that
yields the current ``Authorization`` header, refreshing it through the library's
``refresh_api_key_hook`` when one is set.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentsandbox.kube._kaconfig import load_config_modules

if TYPE_CHECKING:
    from kubernetes_asyncio import config as ka_config
    from kubernetes_asyncio.client import Configuration
else:  # the loaders without the generated API client (see _kaconfig)
    ka_config, Configuration = load_config_modules()
from kubernetes_asyncio.config.incluster_config import (  # after the light import above
    SERVICE_CERT_FILENAME,
    SERVICE_HOST_ENV_NAME,
    SERVICE_PORT_ENV_NAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

__all__ = [
    "AuthProvider",
    "ClusterConfig",
    "ConfigError",
    "build_ssl_context",
    "from_configuration",
    "load_config",
    "load_incluster_config",
    "load_kubeconfig",
]

_DEFAULT_KUBECONFIG = os.path.join("~", ".kube", "config")
# Re-run an exec plugin this long before its credential expires.
_EXEC_EXPIRY_SKEW = datetime.timedelta(seconds=30)


class ConfigError(Exception):
    """The connection settings could not be loaded; ``str()`` is one line saying why."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class AuthProvider:
    """Yields the ``Authorization`` header for the next request.

    Tokens come from the ``Configuration``'s ``api_key['BearerToken']`` (already prefixed with
    ``Bearer``/``Basic`` by the loader). When the library installed a ``refresh_api_key_hook``
    (in-cluster token files, re-read every minute; our hook for exec plugins with an expiry), it
    is called before each request — the hooks themselves are cheap time comparisons.
    """

    def __init__(
        self,
        configuration: Configuration,
        *,
        on_unauthorized: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._configuration = configuration
        self._on_unauthorized = on_unauthorized
        self._lock = asyncio.Lock()

    async def header(self) -> str | None:
        """The current ``Authorization`` header value, or None for no (or certificate) auth."""
        configuration = self._configuration
        hook: Any = configuration.refresh_api_key_hook
        if hook is not None:
            result = hook(configuration)
            if asyncio.iscoroutine(result):
                async with self._lock:
                    await result
        token = configuration.api_key.get("BearerToken")
        if token:
            prefix = configuration.api_key_prefix.get("BearerToken")
            return f"{prefix} {token}" if prefix else str(token)
        if configuration.username is not None or configuration.password is not None:
            header = configuration.get_basic_auth_token()
            return str(header) if header else None
        return None

    async def unauthorized(self) -> bool:
        """Called after a 401: force a credential refresh. True if a retry may now succeed."""
        if self._on_unauthorized is None:
            return False
        async with self._lock:
            await self._on_unauthorized()
        return True


@dataclass(slots=True)
class ClusterConfig:
    """Everything :class:`~agentsandbox.kube.client.Client` needs to reach one API server."""

    host: str
    ssl_context: ssl.SSLContext | None
    auth: AuthProvider
    tls_server_name: str | None = None
    proxy: str | None = None
    configuration: Configuration | None = field(default=None, repr=False)


def build_ssl_context(configuration: Configuration) -> ssl.SSLContext | None:
    """Build the TLS context: CA bundle, client certificate/key files, and verification flags.

    Returns None for a plain ``http://`` host. The loader writes inline ``*-data`` fields of the
    kubeconfig to temporary files, so everything here is a file path.
    """
    if not str(configuration.host).startswith("https"):
        return None
    try:
        if configuration.ssl_ca_cert:
            ctx = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        else:
            ctx = ssl.create_default_context()
        if configuration.cert_file:
            ctx.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load TLS material: {_describe(exc)}") from exc
    if not configuration.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif configuration.assert_hostname is False:
        ctx.check_hostname = False
    if getattr(configuration, "disable_strict_ssl_verification", False):
        ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return ctx


def from_configuration(
    configuration: Configuration,
    *,
    on_unauthorized: Callable[[], Awaitable[None]] | None = None,
) -> ClusterConfig:
    """Adapt a loaded ``kubernetes_asyncio`` ``Configuration``."""
    host = str(configuration.host).rstrip("/")
    if not host.startswith(("https://", "http://")):
        raise ConfigError(f"API server address {host!r} is not an http(s) URL")
    return ClusterConfig(
        host=host,
        ssl_context=build_ssl_context(configuration),
        auth=AuthProvider(configuration, on_unauthorized=on_unauthorized),
        tls_server_name=configuration.tls_server_name or None,
        proxy=configuration.proxy or None,
        configuration=configuration,
    )


def _install_exec_refresh(
    loader: Any, configuration: Configuration
) -> Callable[[], Awaitable[None]]:
    """Keep an exec-plugin token fresh.

    kubernetes_asyncio re-runs the plugin only from its ``refresh_token`` polling loop; instead we
    install a ``refresh_api_key_hook`` that re-runs it when the credential's
    ``expirationTimestamp`` is near, and return a callback that forces a re-run after a 401.
    """

    async def rerun() -> None:
        if hasattr(loader, "exec_plugin_expiry"):
            del loader.exec_plugin_expiry
        await loader.load_from_exec_plugin()
        if getattr(loader, "token", None):
            configuration.api_key["BearerToken"] = loader.token

    async def hook(_configuration: Configuration) -> None:
        expiry = getattr(loader, "exec_plugin_expiry", None)
        if not isinstance(expiry, datetime.datetime):
            return
        now = datetime.datetime.now(expiry.tzinfo)
        if expiry - _EXEC_EXPIRY_SKEW <= now:
            await rerun()

    configuration.refresh_api_key_hook = hook
    return rerun


def _existing_kubeconfig_paths(path: str) -> list[str]:
    found: list[str] = []
    for part in path.split(os.pathsep):
        if not part:
            continue
        expanded = os.path.expanduser(part)
        if os.path.exists(expanded):
            if not os.access(expanded, os.R_OK):
                raise ConfigError(f"kubeconfig {expanded} is not readable")
            found.append(expanded)
    return found


async def load_kubeconfig(path: str | None = None, *, context: str | None = None) -> ClusterConfig:
    """Load a kubeconfig file (or an ``os.pathsep``-separated list, merged like ``$KUBECONFIG``).

    ``path=None`` means ``~/.kube/config``. ``context`` overrides ``current-context``.
    """
    path = path or _DEFAULT_KUBECONFIG
    if not _existing_kubeconfig_paths(path):
        raise ConfigError(f"kubeconfig {path} not found")
    configuration = Configuration()
    try:
        loader = await ka_config.load_kube_config(
            config_file=path,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"cannot load kubeconfig {path}: {_describe(exc)}") from exc
    on_unauthorized = None
    user = getattr(loader, "_user", None)
    if user is not None and "exec" in user:
        on_unauthorized = _install_exec_refresh(loader, configuration)
    return from_configuration(configuration, on_unauthorized=on_unauthorized)


def load_incluster_config(
    *, token_filename: str | None = None, cert_filename: str | None = None
) -> ClusterConfig:
    """The pod's service account: ``$KUBERNETES_SERVICE_HOST`` and the mounted token/CA.

    The library re-reads the (rotating, projected) token file once a minute via its hook.
    """
    configuration = Configuration()
    try:
        loader: Any = InClusterConfigLoader(
            token_filename=token_filename or SERVICE_TOKEN_FILENAME,
            cert_filename=cert_filename or SERVICE_CERT_FILENAME,
            try_refresh_token=True,
        )
        loader.load_and_set(configuration)
    except Exception as exc:
        raise ConfigError(f"cannot load in-cluster config: {_describe(exc)}") from exc

    async def reread_token() -> None:
        """After a 401 the token may have rotated already: make the library's hook re-read the
        file on the next request, as client-go does, instead of within the minute."""
        loader.token_expires_at = datetime.datetime.now() - datetime.timedelta(seconds=1)

    return from_configuration(configuration, on_unauthorized=reread_token)


def _in_cluster(token_filename: str) -> bool:
    return (
        bool(os.environ.get(SERVICE_HOST_ENV_NAME))
        and bool(os.environ.get(SERVICE_PORT_ENV_NAME))
        and os.path.isfile(token_filename)
    )


def _default_kubeconfig() -> str | None:
    default = os.path.expanduser(_DEFAULT_KUBECONFIG)
    return default if os.path.exists(default) else None


async def load_config(
    path: str | None = None,
    *,
    context: str | None = None,
    token_filename: str = SERVICE_TOKEN_FILENAME,
) -> ClusterConfig:
    """Find the settings the way controller-runtime's ``GetConfig`` does.

    1. ``path`` (the ``--kubeconfig`` flag), if given;
    2. ``$KUBECONFIG``, if set;
    3. in-cluster, if ``$KUBERNETES_SERVICE_HOST``/``_PORT`` are set and the token is mounted;
    4. ``~/.kube/config``.
    """
    if path:
        return await load_kubeconfig(path, context=context)
    env = os.environ.get("KUBECONFIG")
    if env:
        return await load_kubeconfig(env, context=context)
    if _in_cluster(token_filename):
        return load_incluster_config(token_filename=token_filename)
    default = _default_kubeconfig()
    if default is not None:
        return await load_kubeconfig(default, context=context)
    raise ConfigError(
        "no Kubernetes configuration found: pass --kubeconfig, set $KUBECONFIG, run in a pod, "
        f"or create {_DEFAULT_KUBECONFIG}"
    )
