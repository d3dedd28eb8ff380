"""Print the import cycles among a package's modules (exit status 1 when there is one).

The graph is read from the source with :mod:`ast`, so nothing is imported: an edge ``a -> b`` means
module ``a`` has an ``import`` statement naming ``b`` (or a name inside ``b``) anywhere, including
inside functions, since a deferred import still ties the two modules together.

    python scripts/import_cycles.py pipeline            # cycles
    python scripts/import_cycles.py pipeline --layers   # and the graph between the code's rooms

``--layers`` folds the modules into rooms (each experiment's folder, each instrument's, the registry,
the report, the CLI, the code location, the shared core) and prints which room imports which, with
how many module imports make each edge: the architecture the tests in tests/pipeline/test_import_graph.py
hold.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module an ``ImportFrom`` names (relative imports resolved against ``module``)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports."""
    files = {module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node, module, path.name == "__init__.py")
                # ``from . import x`` imports the submodule x when there is one
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for target in targets:
                while target and target not in files:  # ``import a.b.c`` where only a.b is a module
                    target = target.rpartition(".")[0]
                if target and target != module:
                    graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def room(module: str) -> str | None:
    """The room of a ``pipeline`` module: ``experiments/<name>``, ``instruments/<name>``, ``registry``,
    ``pagekit`` (what an experiment writes its page with), ``reporting`` (the site built from every
    experiment's page), ``cli``, ``definitions``, the modules that read the experiments from above (``plan``,
    ``run_summary`` with ``compilers``) or ``core``; None outside ``pipeline``."""
    parts = module.split(".")
    if parts[0] != "pipeline":
        return None
    if len(parts) == 1:
        return "core"
    if parts[1] in ("experiments", "instruments"):
        return "registry" if len(parts) == 2 else f"{parts[1]}/{parts[2]}"
    if parts[1] in ("pagekit", "reporting", "cli", "definitions"):
        return parts[1]
    # modules above the experiments that read them: the cost model, and the run summary with the
    # outcomes per compiler read from it
    return {"plan": "plan", "plan_calibration": "plan"}.get(
        parts[1], "run_summary" if parts[1] in ("run_summary", "compilers") else "core"
    )


def room_graph(graph: dict[str, set[str]]) -> dict[tuple[str, str], int]:
    """Module imports between different rooms, counted per (importer, imported) room."""
    edges: dict[tuple[str, str], int] = {}
    for module, targets in graph.items():
        a = room(module)
        for t in targets:
            b = room(t)
            if a is not None and b is not None and a != b:
                edges[(a, b)] = edges.get((a, b), 0) + 1
    return edges


def layers_text(graph: dict[str, set[str]]) -> str:
    """The room graph, one importing room per line: ``room -> imported (count), ...``."""
    by_room: dict[str, list[str]] = {}
    for (a, b), n in sorted(room_graph(graph).items()):
        by_room.setdefault(a, []).append(f"{b} ({n})")
    return "\n".join(f"{a} -> {', '.join(targets)}" for a, targets in sorted(by_room.items()))


def main(argv: list[str]) -> int:
    args = [a for a in argv[1:] if a != "--layers"]
    package = Path(args[0] if args else "pipeline")
    graph = import_graph(package)
    if "--layers" in argv:
        print(layers_text(graph))
    found = cycles(graph)
    for component in found:
        print("cycle: " + " <-> ".join(component))
    if not found:
        print(f"no import cycles among the modules of {package}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
