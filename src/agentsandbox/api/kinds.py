"""API groups, versions and kinds of agent-sandbox, with their REST names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

CORE_GROUP: Final = "agents.x-k8s.io"
EXTENSIONS_GROUP: Final = "extensions.agents.x-k8s.io"
#: Ours only (not upstream's): the SandboxWarmPoolAutoscaler (docs/autoscaler-object.md).
AUTOSCALING_GROUP: Final = "autoscaling.agentsandbox.dev"

V1BETA1: Final = "v1beta1"
#: Served (deprecated, same schema, no conversion) so that v1alpha1 manifests keep working.
V1ALPHA1: Final = "v1alpha1"
STORAGE_VERSION: Final = V1BETA1
SERVED_VERSIONS: Final = (V1BETA1, V1ALPHA1)

CORE_API_VERSION: Final = f"{CORE_GROUP}/{V1BETA1}"
EXTENSIONS_API_VERSION: Final = f"{EXTENSIONS_GROUP}/{V1BETA1}"

#: Field index shared by pools and claims: the name of the template they refer to.
TEMPLATE_REF_FIELD: Final = ".spec.sandboxTemplateRef.name"


@dataclass(frozen=True, slots=True)
class Kind:
    """One of our kinds: enough to build objects, owner references and REST paths."""

    group: str
    kind: str
    plural: str
    short_names: tuple[str, ...]
    version: str = V1BETA1

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"

    def at_version(self, version: str) -> Kind:
        return Kind(self.group, self.kind, self.plural, self.short_names, version)

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """``/apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>]``."""
        out = f"/apis/{self.group}/{self.version}"
        if namespace is not None:
            out += f"/namespaces/{namespace}"
        out += f"/{self.plural}"
        if name is not None:
            out += f"/{name}"
        return out


SANDBOX: Final = Kind(CORE_GROUP, "Sandbox", "sandboxes", ("sandbox",))
SANDBOX_TEMPLATE: Final = Kind(
    EXTENSIONS_GROUP, "SandboxTemplate", "sandboxtemplates", ("sandboxtemplate",)
)
SANDBOX_CLAIM: Final = Kind(EXTENSIONS_GROUP, "SandboxClaim", "sandboxclaims", ("sandboxclaim",))
SANDBOX_WARM_POOL: Final = Kind(EXTENSIONS_GROUP, "SandboxWarmPool", "sandboxwarmpools", ("swp",))

ALL_KINDS: Final = (SANDBOX, SANDBOX_TEMPLATE, SANDBOX_CLAIM, SANDBOX_WARM_POOL)

#: Ours only, served at v1alpha1 alone (a new API); not in ALL_KINDS (upstream's four kinds,
#: their owner references and their two served versions).
SANDBOX_WARM_POOL_AUTOSCALER: Final = Kind(
    AUTOSCALING_GROUP,
    "SandboxWarmPoolAutoscaler",
    "sandboxwarmpoolautoscalers",
    ("swpa",),
    version=V1ALPHA1,
)


def kind_of(obj_api_version: str, kind: str) -> Kind | None:
    """Our Kind for an object's ``apiVersion``/``kind`` (any served version), else None."""
    group, _, version = obj_api_version.rpartition("/")
    for k in ALL_KINDS:
        if k.group == group and k.kind == kind and version in SERVED_VERSIONS:
            return k.at_version(version)
    return None
