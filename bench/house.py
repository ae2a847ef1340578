"""The house's figures, measured from the code's own syntax (issue 43's table): imports of ablate's modules
inside functions (outside the CLI's command bodies, where they keep ``ablate --help`` fast, the target is
none), import statements of any module inside functions (the target is at most 15%), modules over 400 lines,
public class names defined twice, ``Any`` per function, the flat modules at the top of the package, and import
circles between modules (function bodies included).

    python bench/house.py

Prints one line per figure. Nothing is imported: every figure is read with ``ast`` from ``ablate/``.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "ablate"
LIMIT = 400
SKIP = ("migrations",)


def modules() -> dict[str, Path]:
    """``{dotted name: path}`` of every module of ablate but the migrations."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        if any(part in SKIP for part in path.parts):
            continue
        rel = path.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        out[name] = path
    return out


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")[: -node.level] if not module.endswith("__init__") else module.split(".")
    return ".".join([*base, node.module] if node.module else base)


def imports(name: str, tree: ast.AST, known: set[str]) -> list[tuple[str, bool]]:
    """``[(imported ablate module, inside a function)]`` of one module."""
    out = []
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            inside.update(id(n) for n in ast.walk(fn) if n is not fn)
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, node)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for t in targets:
            if t.startswith("ablate"):
                while t not in known and "." in t:
                    t = t.rsplit(".", 1)[0]
                out.append((t, id(node) in inside))
    return out


def statements(tree: ast.AST) -> tuple[int, int]:
    """``(import statements, of them inside a function)`` of one module, whatever they import."""
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            inside.update(id(n) for n in ast.walk(fn) if n is not fn)
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    return len(found), sum(id(n) in inside for n in found)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return found


@dataclasses.dataclass
class House:
    """The figures, as ``main`` prints them; ``tests/unit/test_house.py`` holds the targets."""

    circles: list[list[str]]
    own_imports: int  # imports of ablate's own modules (one per module imported)
    own_inside: int  # of them inside a function
    outside_cli: list[str]  # "module: imported" for those inside a function of a module outside ablate/cli/
    statements: int  # import statements of any module
    statements_inside: int
    long: list[tuple[int, str]]  # (lines, path) of the modules over LIMIT lines
    twice: dict[str, list[str]]  # public class name -> the modules that define it
    functions: int
    anys: int
    flat: list[str]  # the modules at the top of the package


def measure() -> House:
    mods = modules()
    known = set(mods)
    graph: dict[str, set[str]] = collections.defaultdict(set)
    total = inner = functions = anys = 0
    outside_cli: list[str] = []
    stmts = stmts_inner = 0
    long: list[tuple[int, str]] = []
    classes: dict[str, list[str]] = collections.defaultdict(list)
    for name, path in mods.items():
        text = path.read_text()
        tree = ast.parse(text)
        for target, in_function in imports(name, tree, known):
            total += 1
            inner += in_function
            if in_function and not name.startswith("ablate.cli"):
                outside_cli.append(f"{name}: {target}")
            if target != name:
                graph[name].add(target)
        n, n_inner = statements(tree)
        stmts, stmts_inner = stmts + n, stmts_inner + n_inner
        lines = len(text.splitlines())
        if lines > LIMIT:
            long.append((lines, str(path.relative_to(ROOT.parent))))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions += 1
                anys += sum(isinstance(n, ast.Name) and n.id == "Any" for n in ast.walk(node))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                classes[node.name].append(name)
    twice = {k: v for k, v in classes.items() if len(v) > 1}
    flat = sorted(p.name for p in ROOT.glob("*.py") if p.name != "__init__.py")
    return House(circles(graph), total, inner, sorted(outside_cli), stmts, stmts_inner,
                 sorted(long, reverse=True), twice, functions, anys, flat)


def main() -> None:
    h = measure()
    print(f"import circles (module level and in functions): {len(h.circles)}")
    share = 100 * h.own_inside / h.own_imports
    print(f"imports of ablate's own modules inside functions: {h.own_inside} of {h.own_imports} "
          f"({share:.0f}%); outside ablate/cli/: {len(h.outside_cli)}")
    print(f"import statements inside functions (any module): {h.statements_inside} of {h.statements} "
          f"({100 * h.statements_inside / h.statements:.0f}%)")
    print(f"modules over {LIMIT} lines (migrations aside): {len(h.long)}: "
          + ", ".join(f"{p} {n}" for n, p in h.long))
    print(f"public class names defined twice: {len(h.twice)}: "
          + ", ".join(f"{k} ({', '.join(v)})" for k, v in sorted(h.twice.items())))
    print(f"Any per function: {h.anys / h.functions:.2f} ({h.anys} in {h.functions} functions)")
    print(f"flat top-level modules: {len(h.flat)}: {', '.join(h.flat)}")


if __name__ == "__main__":
    main()
