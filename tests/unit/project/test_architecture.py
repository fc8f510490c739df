"""The source tree's shape: module size, the one-way layers, no import cycles.

The layers are ``kube`` <- ``api`` <- ``controllers`` <- ``cli``: a package imports only from the
packages to its left (and itself). ``sim`` sits beside ``cli`` (it may import ``controllers``)
and nothing imports it; ``devcluster`` imports nothing else from the project. Every import is
counted, the ones inside functions and ``TYPE_CHECKING`` blocks too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"
PACKAGE = "agentsandbox"
MAX_LINES = 600

# what each top-level package may import from the project besides itself
ALLOWED: dict[str, set[str]] = {
    "kube": set(),
    "api": {"kube"},
    "controllers": {"kube", "api"},
    "cli": {"kube", "api", "controllers", "devcluster"},
    "sim": {"kube", "api", "controllers"},
    "devcluster": set(),
}


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imported(module: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """Every module ``module`` imports, with the line, relative imports resolved.
    ``from pkg import name`` imports the module ``pkg.name`` when there is one (``known``), else
    ``pkg`` itself; a package's parents are not counted (every import runs them)."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in known else target), node.lineno


def graph() -> dict[str, set[tuple[str, int]]]:
    mods = modules()
    edges: dict[str, set[tuple[str, int]]] = {m: set() for m in mods}
    for module, path in mods.items():
        for target, line in imported(module, path, set(mods)):
            if target in mods and target != module:
                edges[module].add((target, line))
    return edges


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_module_under_src_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(SRC)): n
        for p in (SRC / PACKAGE).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them along a real seam): {long}"


def test_every_package_imports_only_the_layers_below_it() -> None:
    bad = []
    for module, targets in graph().items():
        own = layer(module)
        if own not in ALLOWED:
            continue
        for target, line in targets:
            other = layer(target)
            if other and other != own and other not in ALLOWED[own]:
                bad.append(f"{module}:{line} imports {target} ({own} may not import {other})")
    assert not bad, "\n".join(sorted(bad))


def test_every_top_level_package_has_a_layer_rule() -> None:
    packages = {p.name for p in (SRC / PACKAGE).iterdir() if (p / "__init__.py").exists()}
    assert packages == set(ALLOWED), packages ^ set(ALLOWED)


def cycles(edges: dict[str, set[tuple[str, int]]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _ in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_there_is_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_package_inits_import_no_submodules_but_a_controllers_setup() -> None:
    bad = []
    mods = modules()
    for module, path in mods.items():
        if path.name != "__init__.py":
            continue
        targets = {t for t, _ in graph()[module]}
        if layer(module) == "controllers" and module.count(".") == 2:
            targets.discard(f"{module}.controller")
        if targets:
            bad.append(f"{module} imports {sorted(targets)}")
    assert not bad, "\n".join(bad)


def test_the_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": {("b", 1)}, "b": {("c", 1)}, "c": {("a", 1)}, "d": {("a", 1)}}
    assert cycles(edges) == [["a", "b", "c"]]


def test_the_import_scan_resolves_relative_and_submodule_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import a\n")
    mod = pkg / "b.py"
    mod.write_text("from .a import x\nimport os\n\ndef f():\n    from pkg import c, y\n")
    known = {"pkg", "pkg.a", "pkg.b", "pkg.c"}
    assert {t for t, _ in imported("pkg.b", mod, known)} == {"pkg.a", "os", "pkg", "pkg.c"}
    assert {t for t, _ in imported("pkg", pkg / "__init__.py", known)} == {"pkg.a"}
