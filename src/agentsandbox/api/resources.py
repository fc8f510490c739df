"""REST resources of our kinds, for the runtime's client and informers (storage version)."""

from __future__ import annotations

from typing import Final

from agentsandbox.kube.resources import Resource

from .kinds import (
    SANDBOX,
    SANDBOX_CLAIM,
    SANDBOX_TEMPLATE,
    SANDBOX_WARM_POOL,
    SANDBOX_WARM_POOL_AUTOSCALER,
    Kind,
)


def resource_of(kind: Kind) -> Resource:
    return Resource(kind.group, kind.version, kind.plural, kind.kind)


SANDBOXES: Final = resource_of(SANDBOX)
SANDBOX_TEMPLATES: Final = resource_of(SANDBOX_TEMPLATE)
SANDBOX_CLAIMS: Final = resource_of(SANDBOX_CLAIM)
SANDBOX_WARM_POOLS: Final = resource_of(SANDBOX_WARM_POOL)
SANDBOX_WARM_POOL_AUTOSCALERS: Final = resource_of(SANDBOX_WARM_POOL_AUTOSCALER)
