"""Descriptions of API resources and the REST paths that address them.

A :class:`Resource` is what the client needs to build a URL: group, version, plural, and whether
the resource lives in a namespace. ``kind`` is carried along so that list items (which the server
sends without ``apiVersion``/``kind``) can be completed, and so that objects can be built.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

__all__ = [
    "CONFIGMAPS",
    "CUSTOMRESOURCEDEFINITIONS",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "NETWORKPOLICIES",
    "NODES",
    "PERSISTENTVOLUMECLAIMS",
    "PODS",
    "RESOURCEQUOTAS",
    "SECRETS",
    "SERVICEACCOUNTS",
    "SERVICES",
    "Resource",
]


def _segment(value: str) -> str:
    # Names are DNS subdomains in practice; quote anyway so a bad name cannot change the path.
    plain = value.replace("-", "").replace(".", "")
    if plain.isascii() and plain.isalnum():
        return value
    if value in (".", ".."):
        raise ValueError(f"{value!r} cannot be used as a path segment")
    return quote(value, safe="")


@dataclass(frozen=True, slots=True)
class Resource:
    """One REST resource: ``/api/v1/namespaces/{ns}/pods`` or ``/apis/{group}/{version}/...``."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` field of objects of this resource (``v1``, ``apps/v1``)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        """``/api/v1`` for the core group, ``/apis/{group}/{version}`` otherwise."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def group_resource(self) -> str:
        """``plural.group`` (``pods``, ``leases.coordination.k8s.io``), as in RBAC and errors."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(
        self,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """The REST path for a collection (``name`` is None) or one object.

        For a namespaced resource, ``namespace=None`` addresses all namespaces (list/watch only).
        A cluster-scoped resource rejects a namespace, so that a mistake is loud.
        """
        if namespace is not None and not self.namespaced:
            raise ValueError(
                f"{self.group_resource} is cluster-scoped; got namespace {namespace!r}"
            )
        if namespace is not None and not namespace:
            raise ValueError(f"{self.group_resource}: empty namespace")
        if self.namespaced and namespace is None and name is not None:
            raise ValueError(f"{self.group_resource} is namespaced; a namespace is required")
        parts = [self.prefix]
        if namespace is not None:
            parts.append(f"namespaces/{_segment(namespace)}")
        parts.append(self.plural)
        if name is not None:
            if not name:
                raise ValueError(f"{self.group_resource}: empty name")
            parts.append(_segment(name))
        if subresource is not None:
            if name is None:
                raise ValueError(f"{self.group_resource}: subresource {subresource!r} needs a name")
            parts.append(subresource)
        return "/".join(parts)

    @classmethod
    def from_api_version(
        cls, api_version: str, kind: str, plural: str, *, namespaced: bool = True
    ) -> Resource:
        """Build from an object's ``apiVersion`` (``v1`` or ``group/version``)."""
        group, _, version = api_version.rpartition("/")
        return cls(group, version, plural, kind, namespaced)

    def __str__(self) -> str:
        return f"{self.group_resource}/{self.version}"


PODS = Resource("", "v1", "pods", "Pod")
SERVICES = Resource("", "v1", "services", "Service")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
PERSISTENTVOLUMECLAIMS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
RESOURCEQUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
EVENTS = Resource("events.k8s.io", "v1", "events", "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
NETWORKPOLICIES = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
CUSTOMRESOURCEDEFINITIONS = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)
