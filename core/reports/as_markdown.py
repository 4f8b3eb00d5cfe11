"""The Markdown rendering of a ``Report``: ``templates/report.md.j2`` and its sections (``templates/md/``).

Readable as plain text, and as rendered Markdown (tables, links). Recorded text is escaped (it may contain
Markdown or HTML written by anyone who can append); only http(s) URLs become links.
"""

from __future__ import annotations

from core.reports.model import Report
from core.reports.templating import ReportTemplates, md_code, md_esc, md_link

# The escaping helpers keep their old names for callers that format Markdown the same way.
esc, code, link = md_esc, md_code, md_link


def render_markdown(r: Report, templates: ReportTemplates | None = None) -> str:
    return (templates or ReportTemplates()).render(r, "md")
