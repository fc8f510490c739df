"""Import ``kubernetes_asyncio``'s config loader without its generated API client.

``import kubernetes_asyncio.config`` runs the package's ``__init__``, which imports the whole
generated client: every API class and ~900 model classes, about 35 MB of resident memory in a
controller whose own caches hold a few MB per thousand sandboxes. We use only the kubeconfig and
in-cluster loaders and the ``Configuration`` class they fill in. So, unless the full package is
already loaded, the two parent packages are stood in for by empty package modules while the loader
modules import, and removed again afterwards: a later ``import kubernetes_asyncio`` by anyone else
runs the real ``__init__`` and reuses the very same ``configuration`` and ``config`` modules.

The only name of the generated client the loader modules bind at import is ``ApiClient`` (used by
``new_client_from_config``, which we never call); it is bound to a function that imports the real
class on first use, so that function keeps working for other callers too.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any

_PARENTS = ("kubernetes_asyncio", "kubernetes_asyncio.client")


def _api_client(*args: Any, **kwargs: Any) -> Any:
    from kubernetes_asyncio.client.api_client import ApiClient

    return ApiClient(*args, **kwargs)


def load_config_modules() -> tuple[Any, Any]:
    """``(kubernetes_asyncio.config, kubernetes_asyncio.client.Configuration)``."""
    if "kubernetes_asyncio.config" in sys.modules or "kubernetes_asyncio" in sys.modules:
        from kubernetes_asyncio import config
        from kubernetes_asyncio.client import Configuration

        return config, Configuration
    spec = importlib.util.find_spec("kubernetes_asyncio")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("kubernetes_asyncio is not installed")
    root = next(iter(spec.submodule_search_locations))
    package = types.ModuleType("kubernetes_asyncio")
    package.__path__ = [root]
    client = types.ModuleType("kubernetes_asyncio.client")
    client.__path__ = [f"{root}/client"]
    sys.modules["kubernetes_asyncio"] = package
    sys.modules["kubernetes_asyncio.client"] = client
    try:
        from kubernetes_asyncio.client.configuration import Configuration

        client.Configuration = Configuration  # type: ignore[attr-defined]
        client.ApiClient = _api_client  # type: ignore[attr-defined]
        from kubernetes_asyncio import config
    finally:
        for name in _PARENTS:
            sys.modules.pop(name, None)
    return config, Configuration
