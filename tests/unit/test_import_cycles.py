"""The import graph of ctxwrap has no cycles (issue 23: the layout reads top-down).

Edges are runtime imports between ctxwrap modules, read from the AST: at module level, and
(``import_graph(nested=True)``) also inside functions and classes, which the code uses to keep
start-up light — a late import must not hide a cycle either. Imports under ``if
TYPE_CHECKING:`` are not edges (annotations only). Importing ``pkg.sub`` is an edge to
``pkg.sub``, not to ``pkg``: a package's ``__init__`` always runs before its modules, which is
no cycle. A module loaded through ``importlib`` by name (the CLI's lazy commands) is an edge
too. Folded into packages (``ctxwrap.mechanisms``, ``ctxwrap.daemon``, … and each top-level
module), the graph has no cycle either (issue 42): the packages read top-down.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import ctxwrap

ROOT = Path(ctxwrap.__file__).parent


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.with_suffix("").relative_to(ROOT.parent).parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    body: list[ast.stmt], package: str, mods: dict[str, Path], *, nested: bool
) -> Iterator[str]:
    for node in body:
        if isinstance(node, ast.If):
            if not _type_checking(node.test):
                yield from _imports(node.body, package, mods, nested=nested)
            yield from _imports(node.orelse, package, mods, nested=nested)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _imports(block, package, mods, nested=nested)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                yield sub if sub in mods else module
        elif nested and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield from _imports(node.body, package, mods, nested=nested)
        elif nested:
            for block in ("body", "orelse", "finalbody"):
                inner = getattr(node, block, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    yield from _imports(inner, package, mods, nested=nested)


def _importlib_targets(tree: ast.Module, mods: dict[str, Path]) -> Iterator[str]:
    """Modules a module loads through importlib: string constants naming a ctxwrap module
    (`"ctxwrap.stats"`, or `"ctxwrap.stats:stats_command"` as the CLI's lazy table has them),
    in a module that calls `import_module` — an edge no import statement shows."""
    if not any(isinstance(n, ast.Attribute) and n.attr == "import_module" for n in ast.walk(tree)):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            target = node.value.partition(":")[0]
            if target in mods:
                yield target


def import_graph(*, nested: bool) -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found = set(_imports(tree.body, package, mods, nested=nested))
        if nested:
            found |= set(_importlib_targets(tree, mods))
        graph[name] = {m for m in found if m in mods and m != name}
    return graph


def package_of(module: str) -> str:
    """`ctxwrap.mechanisms.dedup` → `ctxwrap.mechanisms`; a top-level module is its own."""
    parts = module.split(".")
    if len(parts) > 2 or ((ROOT / parts[-1]).is_dir() and len(parts) == 2):
        return ".".join(parts[:2])
    return module


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        node = package_of(mod)
        out.setdefault(node, set())
        for dep in deps:
            if package_of(dep) not in (node, "ctxwrap"):
                out[node].add(package_of(dep))
                out.setdefault(package_of(dep), set())
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_level_import_cycle() -> None:
    assert cycles(import_graph(nested=False)) == []


def test_no_import_cycle_through_in_function_imports() -> None:
    assert cycles(import_graph(nested=True)) == []


def test_no_package_cycle() -> None:
    """The packages read top-down too: no package imports one that imports it back, at module
    level, inside functions or through importlib (issue 42)."""
    assert cycles(package_graph(import_graph(nested=True))) == []


def test_the_graph_sees_importlib_edges() -> None:
    graph = import_graph(nested=True)
    assert "ctxwrap.replay.command" in graph["ctxwrap.cli"]  # the CLI's lazy command table


def test_the_graph_sees_late_imports_but_not_type_checking_ones() -> None:
    src = """
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from ctxwrap import stats
def f():
    from ctxwrap import headline
    if TYPE_CHECKING:
        from ctxwrap import protocol
    with open("x"):
        from ctxwrap import paths
"""
    mods = {
        m: ROOT for m in ("ctxwrap.stats", "ctxwrap.headline", "ctxwrap.protocol", "ctxwrap.paths")
    }
    tree = ast.parse(src)
    assert set(_imports(tree.body, "ctxwrap", mods, nested=False)) == {"typing"}
    nested = set(_imports(tree.body, "ctxwrap", mods, nested=True))
    assert nested == {"typing", "ctxwrap.headline", "ctxwrap.paths"}


def test_the_package_graph_folds_modules_into_their_package() -> None:
    graph = {
        "ctxwrap.daemon.service": {"ctxwrap.stats.compute", "ctxwrap.daemon.app"},
        "ctxwrap.stats.compute": {"ctxwrap.state.pidfile"},
        "ctxwrap.stats.render": {"ctxwrap.daemon.app"},
    }
    assert package_graph(graph)["ctxwrap.daemon"] == {"ctxwrap.stats"}
    assert cycles(package_graph(graph)) == [["ctxwrap.daemon", "ctxwrap.stats"]]


def test_the_check_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
