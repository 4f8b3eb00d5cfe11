"""The HTML rendering of a ``Report``: ``templates/report.html.j2`` and its sections (``templates/html/``).

One self-contained page (inline CSS from ``templates/html/report.css``, no scripts, no external assets) that
reads well in a browser and prints cleanly. Recorded text is escaped (autoescape); only http(s) URLs become links.
The timeline chart (``html/chart.j2``) is inline SVG laid out by ``core/reports/chart.py``: the HTML templates may
call ``timeline_chart(report)``, which this module adds to the environment's helpers.
"""

from __future__ import annotations

from core.reports.chart import timeline_chart
from core.reports.model import Report
from core.reports.templating import ReportTemplates

HTML_HELPERS = {"timeline_chart": timeline_chart}


def render_html(r: Report, templates: ReportTemplates | None = None) -> str:
    templates = templates or ReportTemplates()
    for name, helper in HTML_HELPERS.items():
        templates.env.globals.setdefault(name, helper)
    return templates.render(r, "html")
