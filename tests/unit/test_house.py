"""The house rules, read from the source with ``ast`` (docs/design.md §2):

- the product's import graph (core/, adapters/, bot/, prompts/) has no cycle, counting imports made only for type
  checking (``if TYPE_CHECKING:``) and imports inside functions;
- core/ imports nothing from bot/ or adapters/, nor slack_*, aiohttp, anthropic;
- adapters/ import nothing from bot/;
- no ``isinstance`` (or ``issubclass``) on a storage backend's class outside core/store/: the rest of the code types
  against the ports and asks a backend's factory for a capability.

Each check is a function of a source tree, and ``test_each_rule_catches_what_it_forbids`` runs it on a small tree
that breaks it, so that a check that can no longer fail is noticed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("core", "adapters", "bot", "prompts")
NAMESPACE = "decklog"
#: Packages core may not import (the SDKs of the edges).
VENDORS = ("slack_", "aiohttp", "anthropic")
#: Where the storage backends live: only there may code tell one backend's classes from another's.
STORE = ("core", "store")
BACKENDS = ("sqlite", "postgres", "memory")


def modules(root: Path) -> dict[str, Path]:
    """Every module of the product by its installed name (``decklog.core.views.shapes``; a package by its own)."""
    found: dict[str, Path] = {}
    for top in PRODUCT:
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((NAMESPACE, *parts))] = path
    return found


def imports(path: Path, name: str) -> Iterator[str]:
    """Every name ``path`` (module ``name``) imports, absolute, wherever the import is (type checking, a function):
    ``import a.b`` gives ``a.b``, ``from a.b import c`` gives ``a.b.c``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module → the product modules it imports (a name imported from a package counts as the package, unless it is
    a module of its own)."""
    found = modules(root)

    def resolve(name: str) -> str | None:
        while name:
            if name in found:
                return name
            name = name.rpartition(".")[0]
        return None

    graph: dict[str, set[str]] = {}
    for name, path in found.items():
        targets = {resolve(imported) for imported in imports(path, name)}
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
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
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
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


def forbidden_imports(root: Path, top: str, forbidden: tuple[str, ...]) -> list[str]:
    """``file: name`` for each import under ``top`` of a name that starts with one of ``forbidden``."""
    return sorted(
        {
            f"{path.relative_to(root)}: {imported}"
            for name, path in modules(root).items()
            if path.relative_to(root).parts[0] == top
            for imported in imports(path, name)
            if imported.startswith(forbidden)
        }
    )


def backend_classes(root: Path) -> set[str]:
    """The names of the classes the storage backends define (core/store/sqlite/, postgres/, memory/)."""
    names: set[str] = set()
    for backend in BACKENDS:
        for path in (root.joinpath(*STORE) / backend).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            names.update(node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef))
    return names


def backend_checks(root: Path) -> list[str]:
    """``file:line: call`` for each ``isinstance``/``issubclass`` naming a backend's class outside core/store/."""
    classes = backend_classes(root)
    found: list[str] = []
    for path in modules(root).values():
        if path.relative_to(root).parts[: len(STORE)] == STORE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass")
                and len(node.args) == 2
            ):
                continue
            named = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            named |= {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
            if named & classes:
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


# -- the rules, on the product -------------------------------------------------------------------------------------


def test_the_product_import_graph_has_no_cycle() -> None:
    graph = import_graph(ROOT)
    assert len(graph) > 100 and sum(map(len, graph.values())) > 500  # the graph was read, not found empty
    assert cycles(graph) == []


def test_core_imports_nothing_from_bot_or_adapters_nor_the_edges_sdks() -> None:
    forbidden = (f"{NAMESPACE}.bot", f"{NAMESPACE}.adapters", *VENDORS)
    assert forbidden_imports(ROOT, "core", forbidden) == []


def test_adapters_import_nothing_from_bot() -> None:
    assert forbidden_imports(ROOT, "adapters", (f"{NAMESPACE}.bot",)) == []


def test_no_isinstance_on_a_storage_backend_outside_core_store() -> None:
    assert {"SqliteLogStore", "PostgresLogStore", "SqliteIndex", "PostgresIndex"} <= backend_classes(ROOT)
    assert backend_checks(ROOT) == []


# -- each rule can fail --------------------------------------------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for top in PRODUCT:
        (root / top).mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_each_rule_catches_what_it_forbids(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "core/__init__.py": "",
            "core/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from decklog.core.b import B\n",
            "core/b.py": "def f():\n    from decklog.core import a\n",
            "core/c.py": "import aiohttp\nfrom slack_sdk import WebClient\nfrom decklog.bot.x import y\n",
            "core/store/__init__.py": "",
            "core/store/sqlite/__init__.py": "class SqliteLogStore: ...\n",
            "core/store/ports.py": "from decklog.core.store.sqlite import SqliteLogStore\nisinstance(1, SqliteLogStore)\n",
            "adapters/__init__.py": "",
            "adapters/d.py": "from decklog.bot.wiring import build\nfrom decklog.core.c import x\n",
            "bot/__init__.py": "",
            "bot/e.py": "from decklog.core.store import sqlite\nok = isinstance(s, (int, sqlite.SqliteLogStore))\n",
        },
    )
    # a TYPE_CHECKING import one way, an import inside a function the other way: a cycle
    assert cycles(import_graph(root)) == [["decklog.core.a", "decklog.core.b"]]
    assert forbidden_imports(root, "core", (f"{NAMESPACE}.bot", f"{NAMESPACE}.adapters", *VENDORS)) == [
        "core/c.py: aiohttp",
        "core/c.py: decklog.bot.x.y",
        "core/c.py: slack_sdk.WebClient",
    ]
    assert forbidden_imports(root, "adapters", (f"{NAMESPACE}.bot",)) == ["adapters/d.py: decklog.bot.wiring.build"]
    # inside core/store/ a backend's class may be named; anywhere else it may not
    assert backend_checks(root) == ["bot/e.py:2: isinstance(s, (int, sqlite.SqliteLogStore))"]
