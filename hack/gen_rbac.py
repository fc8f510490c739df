#!/usr/bin/env python3
"""Render the controller's RBAC from its one source, ``hack/rbac.toml``, into the kustomize
manifests (``deploy/rbac.yaml``, ``deploy/aggregate-roles/aggregate-roles.yaml``), the chart's
``templates/rbac.yaml`` and the tables of docs/deploy.md ("What the RBAC grants, and why",
between ``<!-- generated (hack/gen_rbac.py): NAME -->`` and ``<!-- end -->``).

    python hack/gen_rbac.py           # write them
    python hack/gen_rbac.py --check   # exit 1 (and name the files) if one is stale

Each role's object with its rules, and its binding to the controller's ServiceAccount, come from
the data (``@role NAME`` and ``@binding NAME`` in the skeletons below, in the file's ``Style`` of
labels and namespaces); the rest of each file (comments, the ServiceAccount, the chart's
templating) is the skeleton. tests/unit/project/test_rbac_generated.py runs ``--check``;
tests/unit/project/test_rbac_call_sites.py checks the data against the API calls of the code.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "hack" / "rbac.toml"
KUSTOMIZE = ROOT / "deploy" / "rbac.yaml"
AGGREGATE = ROOT / "deploy" / "aggregate-roles" / "aggregate-roles.yaml"
CHART = ROOT / "deploy" / "helm" / "agent-sandbox" / "templates" / "rbac.yaml"
DOC = ROOT / "docs" / "deploy.md"

#: every verb RBAC knows for resources (besides "*", which we never grant)
VERBS = (
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
)
RULE_KEYS = {"comment", "group", "resources", "names", "verbs", "admission", "why"}
ROLE_KEYS = {"kind", "name", "doc_block", "controller_packages", "rule"}
DOC_START = re.compile(r"<!-- generated \(hack/gen_rbac\.py\): ([a-z0-9-]+) -->\n")
DOC_END = "<!-- end -->"
SUPERSCRIPT = "¹"


def load(path: Path = SOURCE) -> dict[str, dict[str, Any]]:
    """The roles by name, validated: known keys and verbs, ``admission`` within ``verbs``, a
    ``why`` on every rule of a role with a docs table."""
    with path.open("rb") as f:
        data = tomllib.load(f)
    roles: dict[str, dict[str, Any]] = {}
    for role in data["role"]:
        name = role["name"]
        if set(role) - ROLE_KEYS:
            raise SystemExit(f"{path}: role {name}: unknown keys {sorted(set(role) - ROLE_KEYS)}")
        if role["kind"] not in ("ClusterRole", "Role"):
            raise SystemExit(f"{path}: role {name}: kind {role['kind']!r}")
        if name in roles:
            raise SystemExit(f"{path}: role {name} twice")
        for i, rule in enumerate(role["rule"]):
            where = f"{path}: role {name}, rule {i + 1}"
            if set(rule) - RULE_KEYS:
                raise SystemExit(f"{where}: unknown keys {sorted(set(rule) - RULE_KEYS)}")
            if not rule["resources"] or not rule["verbs"]:
                raise SystemExit(f"{where}: no resources or no verbs")
            if unknown := set(rule["verbs"]) - set(VERBS):
                raise SystemExit(f"{where}: unknown verbs {sorted(unknown)}")
            if len(set(rule["verbs"])) != len(rule["verbs"]):
                raise SystemExit(f"{where}: a verb twice")
            if extra := set(rule.get("admission", ())) - set(rule["verbs"]):
                raise SystemExit(f"{where}: admission verbs not granted: {sorted(extra)}")
            if "doc_block" in role and not rule.get("why"):
                raise SystemExit(f"{where}: no why (the role has a docs table)")
        roles[name] = role
    return roles


# ----------------------------------------------------------------------------------- YAML
def _flow(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def rules_yaml(role: dict[str, Any]) -> str:
    """``rules:`` and the rules, each below its comment, as in the manifests."""
    out = ["rules:"]
    for rule in role["rule"]:
        for line in rule.get("comment", "").splitlines():
            out.append(f"  # {line}".rstrip())
        out.append(f"  - apiGroups: {_flow([rule['group']])}")
        out.append(f"    resources: {_flow(rule['resources'])}")
        if "names" in rule:
            out.append(f"    resourceNames: {_flow(rule['names'])}")
        out.append(f"    verbs: {_flow(rule['verbs'])}")
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class Style:
    """What a skeleton's objects say in its own way: the lines of every object's ``labels:``
    (indented by 4), the ServiceAccount's namespace (the subject of every binding), and the
    namespace of a Role and of its RoleBinding."""

    labels: str
    namespace: str
    role_namespace: str


KUSTOMIZE_STYLE = Style(
    labels="    app: agent-sandbox-controller\n",
    namespace="agent-sandbox-system",
    role_namespace="agent-sandbox-system",
)
CHART_STYLE = Style(
    labels='    {{- include "asc.labels" . | nindent 4 }}\n',
    namespace='{{ include "asc.namespace" . }}',
    role_namespace='{{ include "asc.leaderElectionNamespace" . }}',
)


def _head(kind: str, name: str, style: Style, extra_labels: str = "") -> str:
    """An RBAC object's apiVersion, kind and metadata (a namespace for the namespaced kinds)."""
    namespace = f"  namespace: {style.role_namespace}\n" if kind in ("Role", "RoleBinding") else ""
    return (
        f"apiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\nmetadata:\n  name: {name}\n"
        f"{namespace}  labels:\n{style.labels}{extra_labels}"
    )


def role_yaml(role: dict[str, Any], style: Style, extra_labels: str = "") -> str:
    """The role object: its head (with ``extra_labels`` after the style's) and its rules."""
    return _head(role["kind"], role["name"], style, extra_labels) + rules_yaml(role)


def binding_yaml(role: dict[str, Any], style: Style) -> str:
    """The role's binding, of the same name, to the controller's ServiceAccount."""
    return (
        _head(role["kind"] + "Binding", role["name"], style)
        + "roleRef:\n  apiGroup: rbac.authorization.k8s.io\n"
        + f"  kind: {role['kind']}\n  name: {role['name']}\n"
        + "subjects:\n  - kind: ServiceAccount\n    name: agent-sandbox-controller\n"
        + f"    namespace: {style.namespace}\n"
    )


def _fill(skeleton: str, roles: dict[str, dict[str, Any]], style: Style) -> str:
    """The skeleton with each ``@role NAME`` line (and the label lines indented by 4 below it,
    its extra labels) replaced by the role object, and each ``@binding NAME`` by its binding."""

    def one(m: re.Match[str]) -> str:
        role = roles[m.group(2)]
        if m.group(1) == "role":
            return role_yaml(role, style, m.group(3))
        return binding_yaml(role, style)

    return re.sub(
        r"^@(role|binding) ([a-z-]+)\n((?:    \S.*\n)*)", one, skeleton, flags=re.MULTILINE
    )


KUSTOMIZE_SKELETON = """\
# RBAC for agent-sandbox-controller. Generated by `python hack/gen_rbac.py` from hack/rbac.toml
# (edit that file, not this one); every rule is explained in docs/deploy.md, and
# tests/unit/project/test_rbac_call_sites.py checks the rules against the API calls the code
# makes. The ClusterRoles that aggregate claim rights into the built-in edit/admin/view roles
# are opt-in: deploy/aggregate-roles/.
#
#   ClusterRole agent-sandbox-controller             the Sandbox controller (always running)
#   ClusterRole agent-sandbox-controller-extensions  the SandboxWarmPool, SandboxClaim and
#                                                    SandboxTemplate controllers (--extensions)
#   Role agent-sandbox-controller-leader-election    the leader-election Lease, in
#                                                    agent-sandbox-system only (upstream uses a
#                                                    ClusterRole here; a namespaced Role suffices)
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: agent-sandbox-controller
  namespace: agent-sandbox-system
  labels:
    app: agent-sandbox-controller
---
@role agent-sandbox-controller
---
@role agent-sandbox-controller-extensions
---
@binding agent-sandbox-controller
---
@binding agent-sandbox-controller-extensions
---
# Leader election: one Lease, a3317529.agent-sandbox.x-k8s.io, in the controller's own namespace.
# "create" cannot be limited by name (the object does not exist yet); reading and renewing can.
@role agent-sandbox-controller-leader-election
---
@binding agent-sandbox-controller-leader-election
"""

#: the two ClusterRoles that aggregate into the built-in roles, in both the kustomize file and the
#: chart: their extra labels are what aggregates them
AGGREGATE_ROLES = """\
@role agent-sandbox-edit
    rbac.authorization.k8s.io/aggregate-to-edit: "true"
    rbac.authorization.k8s.io/aggregate-to-admin: "true"
---
@role agent-sandbox-view
    rbac.authorization.k8s.io/aggregate-to-view: "true"
"""

AGGREGATE_SKELETON = (
    """\
# Generated by `python hack/gen_rbac.py` from hack/rbac.toml (edit that file, not this one).
# Namespace users: the built-in "edit" and "admin" roles may create and delete claims and read
# sandboxes, pools and templates; "view" may read them. Opt-in (upstream
# ships no such aggregation); the chart's rbac.aggregateToDefaultRoles makes the same two.
"""
    + AGGREGATE_ROLES
)

CHART_SKELETON = (
    """\
{{- /*
Generated by `python hack/gen_rbac.py` from hack/rbac.toml (edit that file, not this one): the
RBAC of deploy/rbac.yaml (every rule is explained in docs/deploy.md), with the release's
namespace for the ServiceAccount. tests/integration/test_helm.py checks it equals the kustomize
install's.
*/ -}}
---
@role agent-sandbox-controller
---
{{- if .Values.controller.extensions }}
@role agent-sandbox-controller-extensions
{{- end }}
{{- if .Values.rbac.aggregateToDefaultRoles }}
---
# Namespace users: the built-in "edit" and "admin" roles may create and delete claims and read
# sandboxes, pools and templates; "view" may read them. Opt-in:
# upstream ships no such aggregation.
"""
    + AGGREGATE_ROLES
    + """\
{{- end }}
---
@binding agent-sandbox-controller
---
{{- if .Values.controller.extensions }}
@binding agent-sandbox-controller-extensions
{{- end }}
---
# Leader election: one Lease, a3317529.agent-sandbox.x-k8s.io, in the controller's own namespace.
# "create" cannot be limited by name (the object does not exist yet); reading and renewing can.
@role agent-sandbox-controller-leader-election
---
@binding agent-sandbox-controller-leader-election
"""
)


# ----------------------------------------------------------------------------------- docs
def _verbs_cell(rule: dict[str, Any]) -> str:
    admission = set(rule.get("admission", ()))
    return ", ".join(v + (SUPERSCRIPT if v in admission else "") for v in rule["verbs"])


def doc_table(role: dict[str, Any]) -> str:
    """The role's table in docs/deploy.md; a Names column when a rule has resourceNames."""
    with_names = any("names" in r for r in role["rule"])
    head = ["API group", "Resources", *(["Names"] if with_names else []), "Verbs", "Why"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rule in role["rule"]:
        group = f"`{rule['group']}`" if rule["group"] else "core"
        cells = [group, ", ".join(f"`{r}`" for r in rule["resources"])]
        if with_names:
            names = rule.get("names")
            cells.append(", ".join(f"`{n}`" for n in names) if names else "any")
        cells += [_verbs_cell(rule), rule["why"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_doc(text: str, roles: dict[str, dict[str, Any]]) -> str:
    """``text`` with every generated block rendered again; each role with a ``doc_block``
    must have its block exactly once."""
    blocks = {r["doc_block"]: r for r in roles.values() if "doc_block" in r}
    out: list[str] = []
    seen: list[str] = []
    pos = 0
    for m in DOC_START.finditer(text):
        name = m.group(1)
        if name not in blocks:
            raise SystemExit(f"{DOC}: unknown generated block {name!r}")
        end = text.find(DOC_END, m.end())
        if end < 0:
            raise SystemExit(f"{DOC}: block {name!r} has no {DOC_END}")
        out += [text[pos : m.end()], doc_table(blocks[name])]
        pos = end
        seen.append(name)
    out.append(text[pos:])
    if sorted(seen) != sorted(blocks):
        raise SystemExit(f"{DOC}: generated blocks {sorted(seen)}, want each of {sorted(blocks)}")
    return "".join(out)


# ----------------------------------------------------------------------------------- main
def outputs(roles: dict[str, dict[str, Any]], doc_text: str) -> dict[Path, str]:
    return {
        KUSTOMIZE: _fill(KUSTOMIZE_SKELETON, roles, KUSTOMIZE_STYLE),
        AGGREGATE: _fill(AGGREGATE_SKELETON, roles, KUSTOMIZE_STYLE),
        CHART: _fill(CHART_SKELETON, roles, CHART_STYLE),
        DOC: render_doc(doc_text, roles),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    parser.add_argument("--source", type=Path, default=SOURCE, help="the data (hack/rbac.toml)")
    args = parser.parse_args(argv)
    files = outputs(load(args.source), DOC.read_text())
    stale = [path for path, text in files.items() if path.read_text() != text]
    if args.check:
        for path in stale:
            print(
                f"{path.relative_to(ROOT)}: stale; run `python hack/gen_rbac.py`", file=sys.stderr
            )
        return 1 if stale else 0
    for path in stale:
        path.write_text(files[path])
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
