"""The project's import graph: no cycles anywhere (lazy imports inside functions count too: they
are dependencies all the same; imports under `if TYPE_CHECKING:` do not, they never run), the layers
import one way, and the torch-free packages never import torch."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ppsd", "sim", "runtime", "profiler", "validation", "dashboard", "bench")
# Each package imports only from packages of a lower layer (or its own): the contract and shared
# vocabulary, the simulator, the runtime (it loads and decodes the model), the profiler (it builds on
# the runtime: its model, its pipeline, its transports), then what combines them (validation, the
# dashboard, which reads folders only) and the benchmarks over everything.
LAYERS = {"ppsd": 0, "sim": 1, "runtime": 2, "profiler": 3, "validation": 4, "dashboard": 4, "bench": 5}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (getattr(test, "id", None) == "TYPE_CHECKING"
                                         or getattr(test, "attr", None) == "TYPE_CHECKING")


def _runtime_nodes(tree: ast.AST):
    """Every node of `tree` except the bodies of `if TYPE_CHECKING:` (annotations only)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in ast.iter_child_nodes(node) if not _type_checking_only(c))


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Project modules `path` imports (resolved to the longest known module name)."""
    out = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    g = {m: _imports(p, m, known) for m, p in mods.items()}
    # importing a.b.c runs a/__init__ and a/b/__init__ first; a package's own __init__ importing its
    # submodules (a registry) is not a cycle with those submodules importing their siblings
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert cycles(graph()) == []


def upward_imports(g: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where a package imports from its own layer or above (other than itself)."""
    out = []
    for mod, deps in g.items():
        a = mod.split(".")[0]
        for dep in deps:
            b = dep.split(".")[0]
            if a != b and LAYERS[b] >= LAYERS[a]:
                out.append((mod, dep))
    return sorted(out)


def test_layers_import_one_way():
    assert upward_imports(graph()) == []


def test_the_layer_check_sees_function_level_imports():
    """A lazy import inside a function is caught like a top-level one."""
    tree = ast.parse("def f():\n    from profiler.latency import x\n")
    names = [n.module for n in _runtime_nodes(tree) if isinstance(n, ast.ImportFrom)]
    assert names == ["profiler.latency"]
    assert upward_imports({"runtime.x": {"profiler.latency"}, "profiler.y": {"runtime.x"}}) == [
        ("runtime.x", "profiler.latency")]


def test_type_checking_imports_are_not_dependencies():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\nimport b\n")
    names = [a.name for n in _runtime_nodes(tree) if isinstance(n, ast.Import) for a in n.names]
    assert names == ["b"]


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_sim_and_dashboard_never_import_torch():
    for name, path in _modules().items():
        if name.split(".")[0] in ("sim", "dashboard", "ppsd"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                assert not any(n == "torch" or n.startswith(("torch.", "transformers")) for n in names), name
