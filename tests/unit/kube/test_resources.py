"""REST paths of resources: collections and objects, namespaced or not, and the misuses that
must fail loudly rather than address the wrong path."""

from __future__ import annotations

import pytest

from agentsandbox.kube.resources import LEASES, NAMESPACES, PODS, Resource


def test_paths_of_collections_objects_and_subresources() -> None:
    assert PODS.path() == "/api/v1/pods"
    assert PODS.path("ns") == "/api/v1/namespaces/ns/pods"
    assert PODS.path("ns", "p-1.a") == "/api/v1/namespaces/ns/pods/p-1.a"
    assert PODS.path("ns", "p", "status") == "/api/v1/namespaces/ns/pods/p/status"
    assert LEASES.path("kube-system", "l") == (
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l"
    )
    assert NAMESPACES.path(name="n") == "/api/v1/namespaces/n"
    assert str(LEASES) == "leases.coordination.k8s.io/v1" and str(PODS) == "pods/v1"


def test_a_name_that_is_not_a_plain_dns_name_is_quoted_into_one_segment() -> None:
    assert PODS.path("ns", "a/b?c") == "/api/v1/namespaces/ns/pods/a%2Fb%3Fc"
    with pytest.raises(ValueError):
        PODS.path("ns", "..")
    with pytest.raises(ValueError):
        PODS.path(".", "p")


@pytest.mark.parametrize(
    ("resource", "args", "says"),
    [
        (NAMESPACES, ("ns", "n"), "cluster-scoped"),
        (PODS, ("", "p"), "empty namespace"),
        (PODS, (None, "p"), "a namespace is required"),
        (PODS, ("ns", ""), "empty name"),
        (PODS, ("ns", None, "status"), "needs a name"),
    ],
)
def test_misuses_fail_instead_of_addressing_another_path(
    resource: Resource, args: tuple[str | None, ...], says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        resource.path(*args)


def test_a_resource_from_an_objects_api_version() -> None:
    widgets = Resource.from_api_version("example.com/v1", "Widget", "widgets", namespaced=False)
    assert (widgets.group, widgets.version, widgets.namespaced) == ("example.com", "v1", False)
    assert widgets.path(name="w") == "/apis/example.com/v1/widgets/w"
    core = Resource.from_api_version("v1", "ConfigMap", "configmaps")
    assert core.group == "" and core.path("ns") == "/api/v1/namespaces/ns/configmaps"
