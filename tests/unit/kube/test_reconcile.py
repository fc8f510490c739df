"""Reconcile requests: the key of one object."""

from __future__ import annotations

from agentsandbox.kube.reconcile import Request
from tests.unit.kube.controller_helpers import obj


def test_request_key_looks_like_client_go() -> None:
    assert str(Request("ns", "a")) == "ns/a"
    assert str(Request("", "node-1")) == "node-1"
    assert Request.from_object(obj("a")) == Request("ns", "a")
