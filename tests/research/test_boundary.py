"""research/ is a consumer of decklog, like bench/: the product (core/, adapters/, bot/, prompts/) never imports it,
nor bench/ or tests/, and the wheel does not list it. Everything imports the product through its one namespace,
``decklog`` (setup.py maps the folders there)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("core", "adapters", "bot", "prompts")
CONSUMERS = ("research", "bench", "tests")


def _parse(path: Path) -> ast.Module:
    """``ast.parse``, once more if CPython 3.11's AST conversion raises "AST constructor recursion depth mismatch":
    its depth counter is shared, so a thread that compiles at the same moment (a server a previous test left in
    this worker) can upset it. That is the interpreter's state, not the file's; a second parse reads the file."""
    text = path.read_text(encoding="utf-8")
    try:
        return ast.parse(text, str(path))
    except SystemError:
        return ast.parse(text, str(path))


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_product_imports_no_consumer() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        for name in _imported(path)
        if name.split(".")[0] in CONSUMERS
    ]
    assert found == []


def test_everything_imports_the_product_through_the_decklog_namespace() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for package in (*PRODUCT, *CONSUMERS)
        for path in sorted((ROOT / package).rglob("*.py"))
        for name in _imported(path)
        if name.split(".")[0] in PRODUCT
    ]
    assert found == []


def test_the_wheel_lists_only_the_product() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    setup = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    product = next(
        ast.literal_eval(node.value)
        for node in setup.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "PRODUCT" for t in node.targets)
    )
    assert sorted(product) == sorted(PRODUCT)
    # pyyaml is a runtime dependency only because the product reads YAML itself (the Backstage catalog), never
    # because research/ does
    needs_yaml = [
        p for d in PRODUCT for p in (ROOT / d).rglob("*.py") if re.search(r"^\s*import yaml\b", p.read_text(), re.M)
    ]
    declared = any(d.split("[")[0].strip().lower().startswith("pyyaml") for d in pyproject["project"]["dependencies"])
    assert declared == bool(needs_yaml), f"pyyaml declared: {declared}; product modules importing yaml: {needs_yaml}"
