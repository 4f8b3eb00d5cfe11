"""Post-incident reports: a deterministic function of a scope's log (and its linked scopes' logs).

``build_report(ScopeLog, linked)`` derives a ``Report``; ``render(report, fmt, templates)`` turns it into Markdown,
JSON or self-contained HTML bytes (Markdown and HTML through the Jinja2 templates of ``ReportTemplates``, which an
operator may override from a directory); ``digest(body)`` is the sha256 that names those bytes. The same log always gives
byte-identical output: no wall-clock time, no entry ids, sorted JSON keys, log order everywhere, and
``report_exported`` entries (the record of earlier exports) are not part of a report.

    report = build_report(ScopeLog(scope, tuple(entries), verify), linked=[...])
    body = render(report, "md")
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal, get_args

from decklog.core.errors import InvalidInput
from decklog.core.reports.as_html import render_html
from decklog.core.reports.as_markdown import render_markdown
from decklog.core.reports.build import build_report
from decklog.core.reports.model import Report
from decklog.core.reports.sections.source import EXCLUDED_KINDS, ScopeLog, report_entries
from decklog.core.reports.templating import ReportTemplateError, ReportTemplates

Format = Literal["md", "json", "html"]
FORMATS: tuple[Format, ...] = get_args(Format)
MEDIA_TYPES: dict[Format, str] = {
    "md": "text/markdown; charset=utf-8",
    "json": "application/json",
    "html": "text/html; charset=utf-8",
}


def parse_format(value: str) -> Format:
    """``md`` / ``json`` / ``html`` (``markdown`` is accepted for ``md``), else ``InvalidInput`` naming ``format``."""
    text = value.strip().lower()
    text = "md" if text == "markdown" else text
    for fmt in FORMATS:
        if fmt == text:
            return fmt
    raise InvalidInput(f"unknown report format {value!r} (one of: {', '.join(FORMATS)})", field="format")


def render(report: Report, fmt: Format, templates: ReportTemplates | None = None) -> bytes:
    """The report as UTF-8 bytes in ``fmt``; always ends with a newline. ``templates`` defaults to the shipped ones
    (compiled afresh: pass a long-lived ``ReportTemplates`` to compile once)."""
    if fmt == "json":
        text = json.dumps(report.model_dump(mode="json"), sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    elif fmt == "html":
        text = render_html(report, templates)
    elif fmt == "md":
        text = render_markdown(report, templates)
    else:  # pragma: no cover - Format is closed
        raise InvalidInput(f"unknown report format {fmt!r}", field="format")
    return text.encode("utf-8")


def digest(body: bytes) -> str:
    """The hex sha256 that names a report's bytes (recorded in ``report_exported``)."""
    return hashlib.sha256(body).hexdigest()


def filename(scope: str, fmt: Format) -> str:
    """``incident/payments-5xx`` → ``incident-payments-5xx-report.md``."""
    return f"{scope.replace('/', '-')}-report.{fmt}"


__all__ = [
    "EXCLUDED_KINDS",
    "FORMATS",
    "MEDIA_TYPES",
    "Format",
    "Report",
    "ReportTemplateError",
    "ReportTemplates",
    "ScopeLog",
    "build_report",
    "digest",
    "filename",
    "parse_format",
    "render",
    "report_entries",
]
