"""Label selectors: the string form and the ``metav1.LabelSelector`` form."""

from __future__ import annotations

import pytest

from agentsandbox.kube.labels import LabelSelector


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("", {}, True),
        ("app=web", {"app": "web"}, True),
        ("app==web", {"app": "web"}, True),
        ("app=web", {"app": "db"}, False),
        ("app!=web", {}, True),
        ("app!=web", {"app": "web"}, False),
        ("app", {"app": ""}, True),
        ("!app", {"app": "x"}, False),
        ("!app", {}, True),
        ("tier in (a, b),app=web", {"tier": "b", "app": "web"}, True),
        ("tier in (a,b)", {"tier": "c"}, False),
        ("tier notin (a,b)", {}, True),
        ("tier notin (a,b)", {"tier": "a"}, False),
        ("a=1, b=2", {"a": "1", "b": "2"}, True),
        ("a=1,b=2", {"a": "1"}, False),
    ],
)
def test_label_selector_string_form(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert LabelSelector.parse(selector).matches(labels) is matches


def test_label_selector_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        LabelSelector.parse("a=(b")


def test_label_selector_dict_form() -> None:
    selector = LabelSelector.from_dict(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["fe", "be"]},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        }
    )
    assert selector.matches({"app": "web", "tier": "fe"})
    assert not selector.matches({"app": "web", "tier": "fe", "legacy": "1"})
    assert not selector.matches({"app": "web"})
    with pytest.raises(ValueError):
        LabelSelector.from_dict({"matchExpressions": [{"key": "k", "operator": "Gt"}]})
