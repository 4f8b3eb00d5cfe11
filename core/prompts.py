"""Prompt templates as Jinja2 files, rendered strictly: a missing variable, an unused one or an unknown include raises.

Templates live under ``prompts/`` as ``.md`` files. ``{{ name }}`` inserts a variable; ``{% include
"partials/rules.md" %}`` inserts another template, rendered with the same variables. Nothing renders as empty
text by accident (the lenient-template failure of other agent codebases): undefined names raise
(``StrictUndefined``), and before rendering the variables a template and its includes reference
(``jinja2.meta``) are compared with the ones passed, both ways. The bytes of a file are kept as they are (its
trailing newline too), and values are inserted verbatim (no escaping, no re-parsing)::

    library = PromptLibrary.shipped()  # the prompts/ package, found through importlib.resources
    text = library.render("turn", view=view.text, task="triage the incident")
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import jinja2
from jinja2 import meta

_SUFFIX = ".md"


class PromptError(Exception):
    """A template is missing, malformed, includes an unknown or cyclic partial, or got missing or unused variables."""


class PromptLibrary:
    """Loads templates from a directory (compiled once, cached by the environment) and renders them strictly."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(self.root, encoding="utf-8"),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            autoescape=False,  # prompts are plain text for a model, not HTML
            auto_reload=False,
        )
        self._variables: dict[str, frozenset[str]] = {}

    @classmethod
    def shipped(cls) -> PromptLibrary:
        """The prompts that ship with decklog (the ``prompts`` package data, editable or wheel install alike)."""
        return cls(Path(str(resources.files("decklog.prompts"))))

    def source(self, name: str) -> str:
        """The raw text of ``name`` (``turn`` → ``<root>/turn.md``)."""
        return self._source(self._file(name))

    def variables(self, name: str) -> set[str]:
        """Every variable ``name`` needs, its includes' included."""
        return set(self._needs(self._file(name), ()))

    def render(self, name: str, /, **variables: object) -> str:
        """Render ``name`` with ``variables``; every variable must be used and every placeholder filled."""
        needed = self.variables(name)
        missing = sorted(needed - set(variables))
        if missing:
            raise PromptError(f"prompt {name!r} needs the variable(s) {', '.join(missing)}")
        unused = sorted(set(variables) - needed)
        if unused:
            raise PromptError(f"prompt {name!r} does not use the variable(s) {', '.join(unused)}")
        try:
            return self.env.get_template(self._file(name)).render(**variables)
        except jinja2.UndefinedError as exc:
            raise PromptError(f"prompt {name!r}: {exc}") from None

    # -- loading and analysis ---------------------------------------------------------------------------------

    def _file(self, name: str) -> str:
        if name.startswith("/") or ".." in name.replace("\\", "/").split("/"):
            raise PromptError(f"prompt {name!r} is outside {self.root}")
        return name if name.endswith(_SUFFIX) else name + _SUFFIX

    def _source(self, file: str) -> str:
        loader = self.env.loader
        assert loader is not None
        try:
            return loader.get_source(self.env, file)[0]
        except jinja2.TemplateNotFound:
            raise PromptError(f"no prompt template {file.removesuffix(_SUFFIX)!r} (looked in {self.root})") from None

    def _needs(self, file: str, stack: tuple[str, ...]) -> frozenset[str]:
        """The undeclared variables of ``file`` and of everything it includes; a cycle or a dynamic include raises."""
        if file in stack:
            raise PromptError(f"prompt {stack[0]!r}: includes form a cycle ({' → '.join((*stack, file))})")
        if file in self._variables:
            return self._variables[file]
        try:
            ast = self.env.parse(self._source(file), file.removesuffix(_SUFFIX), file)
        except jinja2.TemplateSyntaxError as exc:
            raise PromptError(
                f"prompt {file!r} has a malformed placeholder or tag (line {exc.lineno}: {exc.message})"
            ) from None
        found = set(meta.find_undeclared_variables(ast))
        for included in meta.find_referenced_templates(ast):
            if included is None:
                raise PromptError(f"prompt {file!r} includes a template by a computed name; name it literally")
            found |= self._needs(included, (*stack, file))
        self._variables[file] = frozenset(found)
        return self._variables[file]
