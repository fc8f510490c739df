"""ServiceAccount tokens and identity checks shared by the authentication tests."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from agentsandbox.kube.client import Client
from agentsandbox.kube.resources import SERVICEACCOUNTS, Resource

SELFSUBJECTREVIEWS = Resource(
    "authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", namespaced=False
)


async def service_account_token(client: Client, ns: str, name: str) -> str:
    """Create a ServiceAccount and return a bound token for it from the TokenRequest API."""
    await client.create(SERVICEACCOUNTS, {"metadata": {"name": name}}, ns)
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {"name": name},
        "spec": {"expirationSeconds": 3600},
    }
    answer = await client.create(SERVICEACCOUNTS, request, ns, subresource="token")
    return str(answer["status"]["token"])


async def whoami(c: Client) -> str:
    """The caller's username as the API server authenticated it (allowed to every user)."""
    review = await c.create(
        SELFSUBJECTREVIEWS,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    return str(review["status"]["userInfo"]["username"])


def ca_file(kubeconfig: str, into: Path) -> str:
    """The cluster CA of a kubeconfig as a file path (written into ``into`` if embedded)."""
    cluster = yaml.safe_load(Path(kubeconfig).read_text())["clusters"][0]["cluster"]
    if "certificate-authority-data" in cluster:
        path = into / "ca.crt"
        path.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        return str(path)
    return str(Path(kubeconfig).parent / cluster["certificate-authority"])
