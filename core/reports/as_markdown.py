"""The Markdown rendering of a ``Report``: ``templates/report.md.j2`` and its sections (``templates/md/``).

Readable as plain text, and as rendered Markdown (tables, links). Recorded text is escaped (it may contain
Markdown or HTML written by anyone who can append); only http(s) URLs become links.
"""

from __future__ import annotations

from decklog.core.reports.model import Report
from decklog.core.reports.templating import ReportTemplates


def render_markdown(r: Report, templates: ReportTemplates | None = None) -> str:
    return (templates or ReportTemplates()).render(r, "md")
