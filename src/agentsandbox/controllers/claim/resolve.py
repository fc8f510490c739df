"""What a claim draws from: its template and the warm pools it may adopt from (docs/design/claim.md,
"Warm or cold"), read from the caches, else from the API (a cache miss is not a 404 yet)."""

from __future__ import annotations

from agentsandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS
from agentsandbox.controllers.claim.handlers import ClaimWatches
from agentsandbox.controllers.claim.plan import (
    POLICY_NONE,
    REASON_TEMPLATE_NOT_FOUND,
    REASON_WARM_POOL_NOT_FOUND,
    ClaimFailure,
    Source,
)
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import NotFound
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.resources import Resource
from agentsandbox.kube.store import KubeObject

__all__ = ["lookup", "resolve"]


async def lookup(
    client: Client, resource: Resource, informer: Informer, name: str, ns: str
) -> KubeObject | None:
    """From the cache, else from the API (a cache miss is not a 404 yet)."""
    cached = informer.get(name, ns)
    if cached is not None:
        return cached
    try:
        return await client.get(resource, name, ns)
    except NotFound:
        return None


async def resolve(
    client: Client,
    pools: Informer,
    templates: Informer,
    watches: ClaimWatches,
    claim: KubeObject,
    source: Source,
) -> tuple[KubeObject, list[KubeObject]]:
    """The template and the pools the claim may draw from; :class:`ClaimFailure` when the pool
    it names, or the template, is missing."""
    ns = claim["metadata"]["namespace"]
    pool: KubeObject | None = None
    template_name = source.template
    if source.pool is not None:
        pool = await lookup(client, SANDBOX_WARM_POOLS, pools, source.pool, ns)
        if pool is None and source.by_pool_ref:
            raise ClaimFailure(
                REASON_WARM_POOL_NOT_FOUND, f'SandboxWarmPool "{source.pool}" not found'
            )
        if source.by_pool_ref and pool is not None:
            template_name = ((pool.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name")
    template = (
        await lookup(client, SANDBOX_TEMPLATES, templates, template_name, ns)
        if template_name
        else None
    )
    if template is None:
        raise ClaimFailure(
            REASON_TEMPLATE_NOT_FOUND, f'SandboxTemplate "{template_name or ""}" not found'
        )
    if source.policy == POLICY_NONE:
        return template, []
    if source.pool is not None:
        return template, [pool] if pool is not None else []
    return template, watches.pools_of_template(template)
