"""Label selectors: the string form and ``metav1.LabelSelector``, parsed and matched."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .store import KubeObject

__all__ = ["LabelSelector"]

_REQUIREMENT = re.compile(
    r"""^\s*(?:
        (?P<not>!)\s*(?P<absent>[^\s!=,()]+)
      | (?P<key>[^\s!=,()]+)\s*(?:
            (?P<op>==|=|!=)\s*(?P<value>[^\s!=,()]*)
          | \s(?P<setop>in|notin)\s*\((?P<values>[^()]*)\)
        )?
    )\s*$""",
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class _Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "In":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values  # NotIn


def _split_terms(text: str) -> list[str]:
    terms: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [t for t in (term.strip() for term in terms) if t]


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A label selector: the string form (``a=b,c!=d,e in (x,y),!f``) or ``metav1.LabelSelector``.

    The empty selector matches everything, as in Kubernetes.
    """

    requirements: tuple[_Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        requirements: list[_Requirement] = []
        for term in _split_terms(text):
            match = _REQUIREMENT.match(term)
            if match is None:
                raise ValueError(f"invalid label selector term {term!r}")
            if match["absent"]:
                requirements.append(_Requirement(match["absent"], "DoesNotExist"))
            elif match["op"]:
                operator = "NotIn" if match["op"] == "!=" else "In"
                requirements.append(
                    _Requirement(match["key"], operator, frozenset({match["value"]}))
                )
            elif match["setop"]:
                values = frozenset(v.strip() for v in match["values"].split(",") if v.strip())
                operator = "In" if match["setop"] == "in" else "NotIn"
                requirements.append(_Requirement(match["key"], operator, values))
            else:
                requirements.append(_Requirement(match["key"], "Exists"))
        return cls(tuple(requirements))

    @classmethod
    def from_dict(cls, selector: Mapping[str, Any]) -> LabelSelector:
        """From a ``metav1.LabelSelector`` (``matchLabels`` and ``matchExpressions``)."""
        requirements = [
            _Requirement(str(k), "In", frozenset({str(v)}))
            for k, v in (selector.get("matchLabels") or {}).items()
        ]
        for expr in selector.get("matchExpressions") or ():
            operator = expr.get("operator")
            if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
                raise ValueError(f"invalid label selector operator {operator!r}")
            values = frozenset(str(v) for v in expr.get("values") or ())
            if operator in ("In", "NotIn") and not values:
                raise ValueError(f"operator {operator} needs values")
            requirements.append(_Requirement(str(expr["key"]), operator, values))
        return cls(tuple(requirements))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(req.matches(labels) for req in self.requirements)

    def matches_object(self, obj: KubeObject) -> bool:
        return self.matches((obj.get("metadata") or {}).get("labels"))
