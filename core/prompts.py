"""Prompt templates as files, rendered strictly: a missing variable, an unused one or an unknown partial raises.

Templates live under ``prompts/`` as ``.md`` files. ``{{ name }}`` inserts a variable; ``{{> partials/rules }}``
inserts another template (``prompts/partials/rules.md``), rendered with the same variables. Nothing renders as
empty text by accident (the lenient-template failure of other agent codebases)::

    library = PromptLibrary(Path("prompts"))
    text = library.render("turn", view=view.text, task="triage the incident")
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

_TAG = re.compile(r"\{\{\s*(>\s*)?([A-Za-z0-9_./-]+)\s*\}\}")
_MAX_DEPTH = 8


class PromptError(Exception):
    """A template is missing, refers to an unknown partial, or was rendered with missing or unused variables."""


class PromptLibrary:
    """Loads templates from a directory (cached) and renders them strictly."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._cache: dict[str, str] = {}

    def source(self, name: str) -> str:
        """The raw text of ``name`` (``turn`` → ``<root>/turn.md``)."""
        if name not in self._cache:
            path = (self.root / f"{name}.md").resolve()
            if self.root.resolve() not in path.parents:
                raise PromptError(f"prompt {name!r} is outside {self.root}")
            try:
                self._cache[name] = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                raise PromptError(f"no prompt template {name!r} (looked for {path})") from None
        return self._cache[name]

    def variables(self, name: str) -> set[str]:
        """Every variable ``name`` needs, partials included."""
        found: set[str] = set()
        self._expand(name, {}, found, depth=0, collect_only=True)
        return found

    def render(self, name: str, /, **variables: object) -> str:
        """Render ``name`` with ``variables``; every variable must be used and every placeholder filled."""
        used: set[str] = set()
        text = self._expand(name, {k: str(v) for k, v in variables.items()}, used, depth=0, collect_only=False)
        unused = sorted(set(variables) - used)
        if unused:
            raise PromptError(f"prompt {name!r} does not use the variable(s) {', '.join(unused)}")
        return text

    def _expand(self, name: str, values: Mapping[str, str], used: set[str], *, depth: int, collect_only: bool) -> str:
        if depth > _MAX_DEPTH:
            raise PromptError(f"prompt {name!r}: partials nested deeper than {_MAX_DEPTH} (a cycle?)")
        template = self.source(name)
        missing: list[str] = []

        def replace(match: re.Match[str]) -> str:
            partial, key = match.group(1), match.group(2)
            if partial:
                return self._expand(key, values, used, depth=depth + 1, collect_only=collect_only)
            used.add(key)
            if collect_only:
                return ""
            if key not in values:
                missing.append(key)
                return ""
            return values[key]

        text = _TAG.sub(replace, template)
        if missing:
            raise PromptError(f"prompt {name!r} needs the variable(s) {', '.join(sorted(set(missing)))}")
        if not collect_only and "{{" in _TAG.sub("", template):
            raise PromptError(f"prompt {name!r} has a malformed placeholder (an unclosed '{{{{')")
        return text
