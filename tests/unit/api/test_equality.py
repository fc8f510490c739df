"""Semantic equality (docs/design/architecture.md, "Semantic equality"): typed along the Go
layout, and untyped JSON."""

from __future__ import annotations

from typing import Any

from agentsandbox.api.equality import pod_spec_equal, semantic_equal, typed_equal


def spec(**extra: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "i"}], **extra}


# --------------------------------------------------------------------------- typed (PodSpec)
def test_typed_nil_and_empty_slices_and_maps_are_equal() -> None:
    assert pod_spec_equal(spec(), spec(volumes=[], nodeSelector={}))
    assert pod_spec_equal(spec(), spec(volumes=None))


def test_typed_nil_pointer_differs_from_pointer_to_zero_value() -> None:
    assert not pod_spec_equal(spec(), spec(automountServiceAccountToken=False))
    assert not pod_spec_equal(spec(), spec(terminationGracePeriodSeconds=0))
    assert pod_spec_equal(
        spec(automountServiceAccountToken=False), spec(automountServiceAccountToken=False)
    )


def test_typed_absent_non_pointer_scalars_equal_their_zero_value() -> None:
    assert pod_spec_equal(spec(), spec(hostNetwork=False, dnsPolicy="", restartPolicy=""))
    assert not pod_spec_equal(spec(), spec(hostNetwork=True))


def test_typed_quantities_compare_by_value() -> None:
    a = spec(containers=[{"name": "c", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}])
    b = spec(
        containers=[{"name": "c", "resources": {"limits": {"cpu": "1000m", "memory": "1024Mi"}}}]
    )
    c = spec(containers=[{"name": "c", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}])
    assert pod_spec_equal(a, b)
    assert not pod_spec_equal(a, c)


def test_typed_resource_maps_must_have_the_same_keys() -> None:
    a = spec(containers=[{"name": "c", "resources": {"limits": {"cpu": "1"}}}])
    b = spec(containers=[{"name": "c", "resources": {"limits": {"cpu": "1", "memory": "0"}}}])
    assert not pod_spec_equal(a, b)


def test_typed_non_pointer_zero_struct_equals_absent() -> None:
    a = spec(containers=[{"name": "c", "resources": {}}])
    assert pod_spec_equal(spec(containers=[{"name": "c"}]), a)


def test_typed_int_or_string_keeps_its_kind() -> None:
    def probe(port: Any) -> dict[str, Any]:
        return spec(containers=[{"name": "c", "readinessProbe": {"httpGet": {"port": port}}}])

    assert pod_spec_equal(probe(8080), probe(8080))
    assert not pod_spec_equal(probe(8080), probe("8080"))


def test_typed_ignores_fields_go_does_not_have() -> None:
    assert pod_spec_equal(spec(), spec(notAField={"x": 1}))


def test_typed_list_order_matters() -> None:
    two = [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]
    assert not pod_spec_equal(spec(containers=two), spec(containers=list(reversed(two))))


def test_typed_times_compare_as_instants() -> None:
    a = "2026-05-21T10:00:00Z"
    b = "2026-05-21T12:00:00+02:00"
    assert typed_equal(a, b, "time")
    assert not typed_equal(a, None, "*time")
    assert typed_equal(None, None, "*time")


def test_typed_bool_is_not_an_int() -> None:
    assert not typed_equal(1, True, "int")


# --------------------------------------------------------------------------- untyped JSON
def test_semantic_nil_and_empty_are_equal() -> None:
    assert semantic_equal({"a": 1}, {"a": 1, "b": None, "c": [], "d": {}, "e": ""})
    assert semantic_equal(None, {})
    assert semantic_equal([], None)


def test_semantic_keeps_false_and_zero() -> None:
    assert not semantic_equal({}, {"automountServiceAccountToken": False})
    assert not semantic_equal({}, {"replicas": 0})
    assert semantic_equal({"replicas": 0}, {"replicas": 0})


def test_semantic_bool_differs_from_number() -> None:
    assert not semantic_equal({"a": False}, {"a": 0})
    assert not semantic_equal({"a": True}, {"a": 1})


def test_semantic_quantities_by_value() -> None:
    a = {"resources": {"limits": {"cpu": "0.5", "memory": "1Gi"}, "requests": {"cpu": 1}}}
    b = {"resources": {"limits": {"cpu": "500m", "memory": "1024Mi"}, "requests": {"cpu": "1"}}}
    assert semantic_equal(a, b)
    assert semantic_equal({"emptyDir": {"sizeLimit": "1e3"}}, {"emptyDir": {"sizeLimit": "1k"}})
    assert not semantic_equal({"limits": {"cpu": "1"}}, {"limits": {"cpu": "2"}})


def test_semantic_quantity_comparison_only_in_quantity_places() -> None:
    assert not semantic_equal({"labels": {"cpu": "1"}}, {"labels": {"cpu": "1000m"}})


def test_semantic_times_as_instants() -> None:
    a = {"lastTransitionTime": "2026-05-21T10:00:00Z"}
    b = {"lastTransitionTime": "2026-05-21T10:00:00.000+00:00"}
    assert semantic_equal(a, b)


def test_semantic_nested_empties_vanish() -> None:
    assert semantic_equal({"spec": {"resources": {"limits": {}}}}, {"spec": {}})


def test_semantic_lists_compare_in_order() -> None:
    assert not semantic_equal([1, 2], [2, 1])
    assert semantic_equal([{"a": None}], [{}])
