"""The Jinja2 environment the Markdown and HTML reports render through, and the operator's override directory.

Templates live in ``core/reports/templates/`` (``report.md.j2``, ``report.html.j2`` and one file per section under
``md/`` and ``html/``). An operator may name a directory (``[reports] templates_dir`` in decklog.toml) whose
files override the shipped ones by name: a ``ChoiceLoader``, the operator's directory first.

Strictness is the prompts' (core/prompts.py): an undefined name or attribute raises (``StrictUndefined``), and
before a template renders, every name it and its includes and imports reference (``jinja2.meta``) must be a
context variable or a helper, and the context variable ``report`` must be used. Any failure is a
``ReportTemplateError`` that names the template. HTML templates autoescape (``*.html.j2`` and ``html/*``);
values are escaped with ``html.escape`` so that the bytes match the earlier hand-built renderer.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import meta
from markupsafe import Markup

from decklog.core.errors import DecklogError
from decklog.core.reports import text as t
from decklog.core.reports.chart import timeline_chart
from decklog.core.reports.model import Report

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~])")
CONTEXT = frozenset({"report"})


class ReportTemplateError(DecklogError):
    """A report template is missing, malformed, or refers to a name or attribute that does not exist."""


def md_esc(value: object) -> str:
    """Recorded text as inert Markdown on one line."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(value).split()))


def md_code(value: object) -> str:
    text = " ".join(str(value).split()).replace("`", "'")
    return f"`{text}`" if text else ""


def md_link(label: str, url: str) -> str:
    if not url:
        return label
    safe = url.replace(" ", "%20").replace("(", "%28").replace(")", "%29")
    return f"[{label}]({safe})"


@jinja2.pass_eval_context
def _finalize(ctx: jinja2.nodes.EvalContext, value: object) -> object:
    """In autoescaped (HTML) templates, escape as ``html.escape(quote=True)`` does (``&#x27;``, ``&quot;``)."""
    if ctx.autoescape and not hasattr(value, "__html__"):
        return Markup(html.escape(str(value), quote=True))
    return value


def _autoescape(name: str | None) -> bool:
    return bool(name) and (str(name).endswith(".html.j2") or str(name).startswith("html/"))


HELPERS: dict[str, Callable[..., Any]] = {
    "timeline_chart": timeline_chart,  # the HTML report's inline SVG (core/reports/chart.py)
    "words": t.words,
    "when": t.when,
    "clock": t.clock,
    "day": t.day,
    "duration": t.duration,
    "offset": t.offset,
    "mtta_line": t.mtta_line,
    "usd": t.usd,
    "who": t.who,
    "short": t.short,
    "names": t.names,
    "severity": t.severity,
    "check": t.check,
    "participant_names": t.participant_names,
    "approver": t.approver,
    "lookup": t.lookup,
    "esc": md_esc,
    "code": md_code,
    "link": md_link,
}


class ReportTemplates:
    """Renders a ``Report`` through ``report.<fmt>.j2``; templates compile once per instance."""

    def __init__(self, override_dir: Path | None = None) -> None:
        loaders: list[jinja2.BaseLoader] = []
        if override_dir is not None:
            if not Path(override_dir).is_dir():
                raise ReportTemplateError(f"report templates_dir {str(override_dir)!r} is not a directory")
            loaders.append(jinja2.FileSystemLoader(override_dir, encoding="utf-8"))
        loaders.append(jinja2.FileSystemLoader(Path(__file__).parent / "templates", encoding="utf-8"))
        self.override_dir = override_dir
        self.env = jinja2.Environment(
            loader=jinja2.ChoiceLoader(loaders),
            undefined=jinja2.StrictUndefined,
            autoescape=_autoescape,
            finalize=_finalize,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            auto_reload=False,
        )
        self.env.globals.update(HELPERS)
        self.env.filters.update(HELPERS)
        self._checked: dict[str, frozenset[str]] = {}

    def render(self, report: Report, fmt: str) -> str:
        """``report.<fmt>.j2`` rendered with ``report``; always ends with exactly one newline."""
        name = f"report.{fmt}.j2"
        used = self._names(name, ())
        if not used >= CONTEXT:
            raise ReportTemplateError(f"report template {name!r} does not use the variable(s) report")
        try:
            text = self.env.get_template(name).render(report=report)
        except jinja2.TemplateError as exc:
            raise ReportTemplateError(f"report template {self._where(exc, name)}: {exc}") from None
        return text.rstrip("\n") + "\n"

    def _names(self, name: str, stack: tuple[str, ...]) -> frozenset[str]:
        """Every undeclared name of ``name`` and its includes/imports; unknown ones raise, naming the template."""
        if name in stack:
            raise ReportTemplateError(f"report template {name!r} includes itself ({' → '.join((*stack, name))})")
        if name in self._checked:
            return self._checked[name]
        loader = self.env.loader
        assert loader is not None
        try:
            source = loader.get_source(self.env, name)[0]
            ast = self.env.parse(source, name)
        except jinja2.TemplateNotFound:
            where = f" (included from {stack[-1]!r})" if stack else ""
            raise ReportTemplateError(f"no report template {name!r}{where}") from None
        except jinja2.TemplateSyntaxError as exc:
            raise ReportTemplateError(f"report template {name!r} line {exc.lineno}: {exc.message}") from None
        found = set(meta.find_undeclared_variables(ast))
        unknown = sorted(found - CONTEXT - set(self.env.globals))
        if unknown:
            raise ReportTemplateError(f"report template {name!r} refers to unknown name(s) {', '.join(unknown)}")
        for other in meta.find_referenced_templates(ast):
            if other is None:
                raise ReportTemplateError(f"report template {name!r} includes a template by a computed name")
            found |= self._names(other, (*stack, name))
        self._checked[name] = frozenset(found)
        return self._checked[name]

    @staticmethod
    def _where(exc: jinja2.TemplateError, default: str) -> str:
        """The template file and line an error was raised in (Jinja rewrites tracebacks to template frames)."""
        where, tb = repr(default), exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename.endswith(".j2"):
                where = f"{tb.tb_frame.f_code.co_filename!r} line {tb.tb_lineno}"
            tb = tb.tb_next
        return where
