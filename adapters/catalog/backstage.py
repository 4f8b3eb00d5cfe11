"""Backstage ``catalog-info.yaml`` files as a ``ServiceCatalog`` (``DECKLOG_CATALOG``: a file, or a directory read
recursively for ``*.yaml`` / ``*.yml``). A file may hold several documents (``---``). A document that does not
parse, or an entity that is malformed, is named in ``problems`` with its file and line; the rest still loads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from decklog.core.evidence.catalog import Component, ServiceCatalog, component_from

MAX_FILES = 5000
MAX_FILE_BYTES = 1_000_000


def _files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    found = sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
    yield from found[:MAX_FILES]


def _documents(path: Path, problems: list[str]) -> Iterator[tuple[Any, int]]:
    """Each document of ``path`` with its first line (1-based); a parse error ends the file (named, with its line)."""
    try:
        text = path.read_text(encoding="utf-8")[:MAX_FILE_BYTES]
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{path}: cannot be read: {exc}")
        return
    loader = yaml.SafeLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            yield loader.construct_document(node), node.start_mark.line + 1
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problems.append(f"{where}: not YAML: {getattr(exc, 'problem', None) or exc}")
    finally:
        loader.dispose()


def load_catalog(location: str | Path) -> ServiceCatalog:
    root = Path(location)
    problems: list[str] = []
    components: list[Component] = []
    if not root.exists():
        return ServiceCatalog((), [f"{root}: no such file or directory"])
    for path in _files(root):
        for doc, line in _documents(path, problems):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                problems.append(f"{path}:{line}: not a catalog entity (a mapping with kind and metadata)")
                continue
            try:
                comp = component_from(doc, f"{path}:{line}")
            except ValueError as exc:
                problems.append(f"{path}:{line}: {exc}")
                continue
            if comp is not None:
                components.append(comp)
    return ServiceCatalog(components, problems)
