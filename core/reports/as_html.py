"""The HTML rendering of a ``Report``: ``templates/report.html.j2`` and its sections (``templates/html/``).

One self-contained page (inline CSS from ``templates/html/report.css``, no scripts, no external assets) that
reads well in a browser and prints cleanly. Recorded text is escaped (autoescape); only http(s) URLs become links.
The timeline chart (``html/chart.j2``) is inline SVG laid out by ``core/reports/chart.py``, reached from the
templates as the helper ``timeline_chart(report)`` (core/reports/templating.py).
"""

from __future__ import annotations

from decklog.core.reports.model import Report
from decklog.core.reports.templating import ReportTemplates


def render_html(r: Report, templates: ReportTemplates | None = None) -> str:
    return (templates or ReportTemplates()).render(r, "html")
