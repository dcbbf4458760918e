"""The house's layering, checked on the source: no import circle between modules (type-only
imports included), no package importing one above it, no module past 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "cascade_cli"
#: Packages, lowest first: each may import only those before it (and itself).
LAYERS = [
    "cascade_cli", "errors", "store", "config", "embedding", "registry", "kv", "engine",
    "recall", "documents", "window", "session", "prompts", "server", "cli", "__main__",
]  # fmt: skip


def _modules() -> dict[str, Path]:
    out = {}
    for f in ROOT.rglob("*.py"):
        parts = f.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in mods:
                for alias in node.names:  # a submodule, else a name from the module itself
                    sub = f"{node.module}.{alias.name}"
                    graph[name].add(sub if sub in mods else node.module)
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names if a.name in mods}
        graph[name].discard(name)
    return graph


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_no_import_circles() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                circles.append([*path[path.index(n) :], n])
            elif n not in state:
                visit(n, [*path, n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not circles, circles


def test_no_upward_imports() -> None:
    rank = {p: i for i, p in enumerate(LAYERS)}
    bad = [
        (a, b)
        for a, deps in _graph().items()
        for b in deps
        if rank[_package(b)] > rank[_package(a)]
    ]
    assert not bad, bad


def test_no_module_past_400_lines() -> None:
    long = {str(p): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long
