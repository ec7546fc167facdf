"""The package's import graph as docs/architecture.md draws it: stages over shared layers, every
import pointing down (or sideways within a floor), no modules importing each other in a circle.

Every ``import olmpipe...``/``from olmpipe... import`` of every module is read from its source (the
ones inside functions and ``TYPE_CHECKING`` blocks too: a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "olmpipe"

#: The floors of docs/architecture.md, lowest first: a unit (a top-level package or module of
#: olmpipe) may import units of its own floor or below.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("records", "procs", "compat", "rulejob"),
    ("layout", "prompts", "codeversion"),
    ("models", "bench"),
    ("config",),
    ("generate", "rewards"),
    ("job",),
    ("launch",),
    ("plan",),
    ("rasterize", "validate", "synth", "sft", "difficulty", "train", "evaluate", "report"),
    ("results", "rundiff", "cli", "moved", "rulejobs", "__init__", "__main__"),
)
FLOOR = {unit: i for i, units in enumerate(FLOORS) for unit in units}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """The olmpipe modules ``path`` imports (``from olmpipe.x import y`` counts ``olmpipe.x.y`` when
    that is a module, else ``olmpipe.x``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("olmpipe")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            if not base.startswith("olmpipe"):
                continue
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if _exists(f"{base}.{alias.name}") else base)
    return found


def _exists(module: str) -> bool:
    path = PACKAGE.parent.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _graph() -> dict[str, set[str]]:
    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _module_name(path)
        graph[name] = {m for m in _imports(path) if m != name and _exists(m)}
    return graph


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_unit_has_a_floor():
    units = {_unit(m) for m in _graph()}
    assert units <= set(FLOOR), f"units without a floor in docs/architecture.md: {sorted(units - set(FLOOR))}"


def test_no_import_points_up():
    graph = _graph()
    up = sorted(f"{m} -> {n}" for m, deps in graph.items() for n in deps
                if FLOOR[_unit(n)] > FLOOR[_unit(m)])
    assert not up, "imports pointing up a floor:\n" + "\n".join(up)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
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
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_modules_import_each_other_in_a_circle():
    # a package's __init__ that re-exports its modules is part of them, not a circle
    graph = {m: {n for n in deps if not m.startswith(n + ".") and not n.startswith(m + ".")}
             for m, deps in _graph().items()}
    assert not _cycles(graph), f"import circles: {_cycles(graph)}"


@pytest.mark.parametrize("graph, cycle", [({"a": {"b"}, "b": {"a"}}, [["a", "b"]]), ({"a": {"b"}, "b": set()}, [])])
def test_the_circle_finder_finds_circles(graph, cycle):
    assert _cycles(graph) == cycle
