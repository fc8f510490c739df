"""The controller roles of hack/rbac.toml against the API calls the code makes: every call is
granted (sufficient) and every granted verb is called somewhere (minimal), except the verbs a rule
lists under ``admission`` (required by OwnerReferencesPermissionEnforcement, never called; they
must stay uncalled).

The calls are found in the syntax tree, not by running anything:

- a call ``<client>.<verb method>(RESOURCE, ...)`` where the receiver is named ``client`` or
  ``_client`` (``self.client``, ``self.writer.client``, a parameter ``client``) and RESOURCE is a
  name that resolves, in the module, to a :class:`~agentsandbox.kube.resources.Resource`;
  ``subresource=`` (a string or a name of one) and ``update_status`` give the subresource;
- an informer (``get_informer``, ``for_``, ``owns``, ``watches`` with a resolvable resource): a
  list and a watch, which is all :mod:`agentsandbox.kube.informer` ever calls (checked below).

A call is charged to the role of its controller package (``controller_packages`` in the data);
calls in ``controllers/common/`` to the roles of the packages that use the function or class
holding them; the event recorder's calls to the roles of the packages that call
``event_recorder``; the leader elector's to the leader-election Role; ``cli/controller.py`` to the
core role (the ``agent_sandboxes`` collector reads the Sandbox informer). Any other module of the
runtime making a call fails the test, as does a receiver a client is stored under by another name.

Where the resource is a variable the scan cannot resolve, :data:`UNRESOLVED` says what it is, by
call site; an unresolved call missing from it, or an entry whose call site is gone, fails.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agentsandbox.cli.options import LEADER_ELECTION_ID
from agentsandbox.kube.resources import Resource
from tests.unit.project.scripts import load_script

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "src" / "agentsandbox"
GEN = ROOT / "hack" / "gen_rbac.py"

CORE = "agent-sandbox-controller"
EXTENSIONS = "agent-sandbox-controller-extensions"
LEADER_ELECTION = "agent-sandbox-controller-leader-election"
CONTROLLER_ROLES = (CORE, EXTENSIONS, LEADER_ELECTION)

#: the client's methods and the RBAC verbs they need (``apply`` without a subresource may create)
METHOD_VERBS: dict[str, tuple[str, ...]] = {
    "get": ("get",),
    "list": ("list",),
    "list_page": ("list",),
    "watch": ("watch",),
    "create": ("create",),
    "update": ("update",),
    "update_status": ("update",),
    "patch": ("patch",),
    "apply": ("patch",),
    "delete": ("delete",),
    "delete_collection": ("deletecollection",),
}
CLIENT_NAMES = ("client", "_client")
INFORMER_METHODS = ("get_informer", "for_", "owns", "watches")

#: the children SandboxWriter.apply writes for a Sandbox
SANDBOX_CHILDREN = (("", "pods"), ("", "services"), ("", "persistentvolumeclaims"))

#: Calls whose resource is a variable: (file under src/agentsandbox, function, client method)
#: -> the (group, resource[/subresource]) it can be, and why.
UNRESOLVED: dict[tuple[str, str, str], tuple[tuple[str, str], ...]] = {
    # SandboxWriter.apply writes a Sandbox's children; SandboxController.reconcile passes
    # PERSISTENTVOLUMECLAIMS, PODS and SERVICES; a create answered AlreadyExists reads the child
    # back (get) for any of them.
    ("controllers/sandbox/act.py", "SandboxWriter.apply", "create"): SANDBOX_CHILDREN,
    ("controllers/sandbox/act.py", "SandboxWriter.apply", "patch"): SANDBOX_CHILDREN,
    ("controllers/sandbox/act.py", "SandboxWriter.apply", "get"): SANDBOX_CHILDREN,
    # A DELETE step is planned for the pod and the Service only (replicas 0, service: false,
    # SandboxWriter.expire); a PVC is never deleted (its "delete" is an admission verb).
    ("controllers/sandbox/act.py", "SandboxWriter.apply", "delete"): (
        ("", "pods"),
        ("", "services"),
    ),
    # resolve.lookup: called with SANDBOX_WARM_POOLS and SANDBOX_TEMPLATES (the pool or
    # template a claim names, read from the API when the cache misses it).
    ("controllers/claim/resolve.py", "lookup", "get"): (
        ("extensions.agents.x-k8s.io", "sandboxwarmpools"),
        ("extensions.agents.x-k8s.io", "sandboxtemplates"),
    ),
    # ScaleWriter: the target's resource comes from ScaleWriter.resolve; the CRD admits
    # SandboxWarmPool as the only kind of target (is_sandbox_warm_pool).
    ("controllers/autoscaler/act.py", "ScaleWriter.read_scale", "get"): (
        ("extensions.agents.x-k8s.io", "sandboxwarmpools/scale"),
    ),
    ("controllers/autoscaler/act.py", "ScaleWriter.write_scale", "patch"): (
        ("extensions.agents.x-k8s.io", "sandboxwarmpools/scale"),
    ),
}

#: ``client.raw`` calls: discovery GETs of ``/apis/<group>/<version>`` (non-resource URLs every
#: authenticated user may read through system:discovery; no grant of ours needed).
RAW_DISCOVERY = {
    ("cli/controller.py", "check_crds"),
    ("cli/controller.py", "autoscaler_served"),
    ("controllers/autoscaler/act.py", "ScaleWriter.resolve"),
}


gen = load_script(GEN)


@dataclass(frozen=True)
class Call:
    file: str  # under src/agentsandbox
    function: str  # Class.method or function
    line: int
    method: str  # the client method, or "informer"
    verbs: tuple[str, ...]
    targets: tuple[tuple[str, str], ...] | None  # None: unresolved

    @property
    def site(self) -> str:
        return f"{self.file}:{self.line} ({self.function}, {self.method})"


def _files() -> list[str]:
    controllers = sorted(
        str(p.relative_to(SRC)) for p in (SRC / "controllers").rglob("*.py") if p.is_file()
    )
    kube = sorted(str(p.relative_to(SRC)) for p in (SRC / "kube").glob("*.py"))
    return [*controllers, *kube, "cli/controller.py"]


#: the runtime's own modules that build requests (the client itself and its transport)
RUNTIME_CLIENT = {"kube/client.py", "kube/transport.py"}


def _module(rel: str) -> ModuleType:
    name = "agentsandbox." + rel.removesuffix(".py").replace("/", ".")
    return importlib.import_module(name.removesuffix(".__init__"))


def _walk(tree: ast.AST) -> Iterator[tuple[str, ast.Call]]:
    """Every call with the qualified name of the function it is in."""

    def visit(node: ast.AST, scope: list[str]) -> Iterator[tuple[str, ast.Call]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                yield from visit(child, [*scope, child.name])
                continue
            if isinstance(child, ast.Call):
                yield ".".join(scope) or "<module>", child
            yield from visit(child, scope)

    yield from visit(tree, [])


def _is_client(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in CLIENT_NAMES
    return isinstance(node, ast.Attribute) and node.attr in CLIENT_NAMES


def _names(mod: ModuleType, tree: ast.Module) -> dict[str, Any]:
    """The module's globals, and the names its functions import locally."""
    names = dict(vars(mod))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").startswith("agentsandbox.")
        ):
            source = importlib.import_module(str(node.module))
            for alias in node.names:
                names.setdefault(alias.asname or alias.name, getattr(source, alias.name))
    return names


def _value(names: dict[str, Any], node: ast.expr | None) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    return None


def _arg(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    if len(call.args) > index:
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def _target(mod: dict[str, Any], call: ast.Call, method: str) -> tuple[tuple[str, str], ...] | None:
    resource = _value(mod, _arg(call, 0, "resource"))
    if not isinstance(resource, Resource):
        return None
    sub_node = next((k.value for k in call.keywords if k.arg == "subresource"), None)
    sub = "status" if method == "update_status" else _value(mod, sub_node)
    if sub_node is not None and not isinstance(sub, str):
        return None
    return ((resource.group, f"{resource.plural}/{sub}" if sub else resource.plural),)


@dataclass
class Scan:
    calls: list[Call]
    raw: list[tuple[str, str, ast.Call]]
    trees: dict[str, ast.Module]


def _scan() -> Scan:
    calls: list[Call] = []
    raw: list[tuple[str, str, ast.Call]] = []
    trees: dict[str, ast.Module] = {}
    for rel in _files():
        tree = ast.parse((SRC / rel).read_text())
        trees[rel] = tree
        if rel in RUNTIME_CLIENT:
            continue
        mod = _names(_module(rel), tree)
        for function, call in _walk(tree):
            func = call.func
            if not isinstance(func, ast.Attribute):
                continue
            if _is_client(func.value) and func.attr in METHOD_VERBS:
                verbs = METHOD_VERBS[func.attr]
                has_sub = any(k.arg == "subresource" for k in call.keywords)
                if func.attr == "apply" and not has_sub:
                    verbs = ("patch", "create")
                target = _target(mod, call, func.attr)
                calls.append(Call(rel, function, call.lineno, func.attr, verbs, target))
            elif _is_client(func.value) and func.attr == "raw":
                raw.append((rel, function, call))
            elif func.attr in INFORMER_METHODS and not rel.startswith("kube/"):
                target = _target(mod, call, "informer")
                calls.append(
                    Call(rel, function, call.lineno, "informer", ("list", "watch"), target)
                )
    return Scan(calls, raw, trees)


SCAN = _scan()
ROLES = gen.load()
PACKAGE_ROLE = {
    pkg: name for name, role in ROLES.items() for pkg in role.get("controller_packages", ())
}


def _references(trees: dict[str, ast.Module], name: str) -> set[str]:
    """The controller packages whose code names ``name`` (a call, an import, an attribute)."""
    found = set()
    for rel, tree in trees.items():
        parts = rel.split("/")
        if parts[0] != "controllers" or parts[1] not in PACKAGE_ROLE:
            continue
        for node in ast.walk(tree):
            if (
                (isinstance(node, ast.Name) and node.id == name)
                or (isinstance(node, ast.Attribute) and node.attr == name)
                or (isinstance(node, ast.alias) and node.name == name)
            ):
                found.add(parts[1])
    return found


def roles_of(call: Call) -> set[str]:
    parts = call.file.split("/")
    if parts[0] == "controllers" and parts[1] in PACKAGE_ROLE:
        return {PACKAGE_ROLE[parts[1]]}
    if parts[0] == "controllers" and parts[1] == "common":
        users = _references(SCAN.trees, call.function.split(".")[0])
        return {PACKAGE_ROLE[p] for p in users}
    if call.file == "kube/events.py":
        return {PACKAGE_ROLE[p] for p in _references(SCAN.trees, "event_recorder")}
    if call.file == "kube/leaderelection.py":
        return {LEADER_ELECTION}
    if call.file == "cli/controller.py":
        return {CORE}
    return set()


def _resolved() -> list[tuple[Call, tuple[tuple[str, str], ...]]]:
    out = []
    for call in SCAN.calls:
        if call.file == "kube/informer.py":
            continue  # the informers' own list/watch: stand for every informer site
        targets = call.targets or UNRESOLVED.get((call.file, call.function, call.method))
        if targets is not None:
            out.append((call, targets))
    return out


def _granted(role: str, group: str, resource: str, verb: str) -> bool:
    return any(
        rule["group"] == group and resource in rule["resources"] and verb in rule["verbs"]
        for rule in ROLES[role]["rule"]
    )


# ------------------------------------------------------------------------------ the scan itself
def test_the_scan_finds_the_calls_it_is_meant_to() -> None:
    """A floor, so that a scan which silently finds nothing cannot pass."""
    sites = {(c.file, c.method) for c in SCAN.calls}
    assert ("kube/events.py", "create") in sites
    assert ("kube/leaderelection.py", "update") in sites
    assert ("controllers/warmpool/act.py", "apply") in sites
    assert ("controllers/template/controller.py", "informer") in sites
    assert len(SCAN.calls) > 50


def test_every_call_is_resolved_or_listed() -> None:
    unknown = [
        c.site
        for c in SCAN.calls
        if c.targets is None
        and c.file != "kube/informer.py"
        and (c.file, c.function, c.method) not in UNRESOLVED
    ]
    assert not unknown, "add to UNRESOLVED what these can address:\n" + "\n".join(unknown)


def test_every_listed_call_site_still_exists() -> None:
    present = {(c.file, c.function, c.method) for c in SCAN.calls if c.targets is None}
    gone = sorted(set(UNRESOLVED) - present)
    assert not gone, f"UNRESOLVED names call sites the code no longer has: {gone}"


def test_the_informers_only_list_and_watch() -> None:
    """What makes an informer site worth exactly a list and a watch."""
    methods = {c.method for c in SCAN.calls if c.file == "kube/informer.py"}
    assert methods == {"list", "watch"}


def test_every_call_is_charged_to_a_role() -> None:
    orphans = [c.site for c, _ in _resolved() if not roles_of(c)]
    assert not orphans, "calls from code no role accounts for:\n" + "\n".join(orphans)


def test_raw_requests_are_discovery_reads_only() -> None:
    seen = set()
    for rel, function, call in SCAN.raw:
        seen.add((rel, function))
        assert (rel, function) in RAW_DISCOVERY, f"{rel} {function}: client.raw"
        assert isinstance(call.args[0], ast.Constant) and call.args[0].value == "GET"
        path = call.args[1]
        assert isinstance(path, ast.JoinedStr | ast.Name), ast.dump(path)
    assert seen == RAW_DISCOVERY


def test_clients_are_kept_under_the_names_the_scan_looks_for() -> None:
    """``self.x = client`` (or a parameter annotated as a client) under another name would hide
    its calls from the scan."""
    wrong = []
    for rel, tree in SCAN.trees.items():
        if rel in RUNTIME_CLIENT:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and _is_client_value(node.value):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and target.attr not in CLIENT_NAMES:
                        wrong.append(f"{rel}:{node.lineno} self.{target.attr}")
            if isinstance(node, ast.arg) and node.annotation is not None:
                note = ast.unparse(node.annotation)
                if note.split(" | ")[0] in ("Client", "ScaleClient") and (
                    node.arg not in (*CLIENT_NAMES, "leader_election_client")
                ):
                    wrong.append(f"{rel}:{node.lineno} {node.arg}: {note}")
    assert not wrong, wrong


def _is_client_value(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in (*CLIENT_NAMES, "leader_election_client")


# ------------------------------------------------------------------------------ sufficient
@pytest.mark.parametrize("role", CONTROLLER_ROLES)
def test_every_call_is_granted(role: str) -> None:
    missing = [
        f"{c.site}: {verb} {group or 'core'}/{resource}"
        for c, targets in _resolved()
        if role in roles_of(c)
        for group, resource in targets
        for verb in c.verbs
        if not _granted(role, group, resource, verb)
    ]
    assert not missing, f"{role} lacks:\n" + "\n".join(missing)


def test_the_named_lease_is_the_one_the_elector_uses() -> None:
    for rule in ROLES[LEADER_ELECTION]["rule"]:
        if "names" in rule:
            assert rule["names"] == [LEADER_ELECTION_ID]
        if "create" in rule["verbs"]:
            assert "names" not in rule  # a create cannot be limited by name


# ------------------------------------------------------------------------------ minimal
def _called(role: str) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for c, targets in _resolved()
        if role in roles_of(c)
        for group, resource in targets
        for verb in c.verbs
    }


def _grants(role: str, admission: bool) -> list[tuple[str, tuple[str, str, str]]]:
    """The role's grants, as ("verb group/resource", (group, resource, verb)): those of its
    admission verbs (marked ¹) if ``admission``, else those of its other verbs."""
    return [
        (f"{verb} {rule['group'] or 'core'}/{resource}", (rule["group"], resource, verb))
        for rule in ROLES[role]["rule"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        if (verb in rule.get("admission", ())) == admission
    ]


@pytest.mark.parametrize("role", CONTROLLER_ROLES)
def test_every_granted_verb_is_called(role: str) -> None:
    called = _called(role)
    unused = [name for name, grant in _grants(role, admission=False) if grant not in called]
    assert not unused, f"{role} grants what no code calls:\n" + "\n".join(unused)


@pytest.mark.parametrize("role", CONTROLLER_ROLES)
def test_admission_verbs_are_never_called(role: str) -> None:
    """A verb marked ¹ ("the code never calls it") that the code does call is mislabelled."""
    called = _called(role)
    wrong = [name for name, grant in _grants(role, admission=True) if grant in called]
    assert not wrong, wrong
