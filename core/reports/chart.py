"""The HTML report's timeline chart: a pure function from a ``Report`` to a small model of shapes.

``timeline_chart(report)`` lays out lanes over one UTC time axis: severity over time, the milestones, each alert
from firing to resolved (aggregated into a histogram past a few), and each action from proposal to run to result
and verification. ``templates/html/chart.j2`` renders it as inline SVG: no scripts, no external assets, a
``<title>``/``<desc>`` for screen readers, a tooltip per shape, and a legend. Like the rest of the report it reads
only the report (never the clock): the same report gives the same bytes. ``None`` when there is nothing to place on
a time axis.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from decklog.core.reports import text as t
from decklog.core.reports.chart_canvas import WIDTH, Canvas, Scale, seconds, utc
from decklog.core.reports.chart_lanes import (
    MAX_ACTION_LANES,
    MAX_ALERT_LANES,
    action_lanes,
    alert_lanes,
    milestone_lane,
    severity_lane,
)
from decklog.core.reports.chart_shapes import (
    ALERT_FILL,
    ALERT_LINE,
    CONNECTOR,
    INK,
    MILESTONE,
    OUTCOMES,
    SEVERITY_COLOURS,
    WHITE,
    Item,
    Label,
    Rect,
    Shape,
    clip,
    marker,
    num,
    text_width,
)
from decklog.core.reports.model import Report

LEGEND_ROW = 18.0


@dataclass(frozen=True)
class Chart:
    width: str
    height: str
    title: str
    desc: str
    items: tuple[Item, ...]


def times(report: Report) -> list[float]:
    """Every time the chart places, plus the end of the main scope's log (where open bars stop)."""
    out: list[str] = [report.summary.declared_at or "", report.summary.resolved_at or ""]
    out += [s.at for s in report.impact.severity_history]
    out += [a.first_at for a in report.impact.alerts] + [a.resolved_at or a.last_at for a in report.impact.alerts]
    out += [m.at or "" for m in report.milestones if m.reached]
    for line in report.actions:
        out += [line.proposal.at] if line.proposal else []
        out += [r.at for r in line.runs] + [x.at for r in line.runs for x in r.results]
    out += [v.at for v in report.verifications]
    out += [line.at for line in report.timeline if line.scope == report.scope]
    return sorted(seconds(at) for at in out if at)


def timeline_chart(report: Report) -> Chart | None:
    """The chart of ``report``, or ``None`` when the report places nothing in time."""
    placed = times(report)
    if not placed:
        return None
    c = Canvas(Scale.over(placed[0], placed[-1]))
    severity_lane(c, report.impact.severity_history, report.summary.resolved_at)
    milestone_lane(c, report.milestones)
    alert_lanes(c, report.impact.alerts)
    action_lanes(c, report.actions, report.verifications)
    height = legend(c, c.axis())
    title = f"Timeline of {report.scope}: {report.summary.title}"
    return Chart(num(WIDTH), num(height), clip(title, 200), describe(report, c.scale), c.items())


def legend(c: Canvas, top: float) -> float:
    """The key, wrapped to the chart's width; returns the chart's height."""
    entries: list[tuple[float, str, Callable[[float, float], Item]]] = []
    for sev in (1, 2, 3, 4):
        fill = SEVERITY_COLOURS[sev][0]
        entries.append((12, t.severity(sev), partial(_swatch, w=12, h=12, fill=fill, stroke=WHITE)))
    entries.append((12, "milestone", partial(_marker, "diamond", MILESTONE)))
    entries.append((12, "alert fired", partial(_marker, "triangle_up", ALERT_LINE)))
    entries.append(
        (22, "alert firing (dashed: unresolved)", partial(_swatch, w=22, h=8, fill=ALERT_FILL, stroke=ALERT_LINE))
    )
    entries.append((22, "action run", partial(_swatch, w=22, h=4, fill=CONNECTOR, stroke="none")))
    for shape, colour, words in OUTCOMES.values():
        entries.append((12, words, partial(_marker, shape, colour)))
    x, y = 8.0, top
    for width, words, draw in entries:
        need = width + 6 + text_width(words, 10) + 14
        if x + need > WIDTH - 8:
            x, y = 8.0, y + LEGEND_ROW
        c.legend.append(draw(x, y))
        c.legend.append(Label(num(x + width + 6), num(y + 4), words, INK, size="10"))
        x += need
    return y + LEGEND_ROW


def _swatch(x: float, y: float, *, w: float, h: float, fill: str, stroke: str) -> Item:
    return Rect(num(x), num(y - h / 2), num(w), num(h), fill, stroke)


def _marker(shape: Shape, colour: str, x: float, y: float) -> Item:
    return marker(shape, x + 6, y, colour)


def describe(report: Report, s: Scale) -> str:
    """The chart in words, for screen readers and for anyone without the picture (bounded in length)."""
    span = t.duration(s.last - s.first)
    parts = [f"From {utc(s.first, '%Y-%m-%d %H:%M:%S')} to {s.stamp_of(s.last)} UTC ({span})."]
    steps = sorted(report.impact.severity_history, key=lambda x: (seconds(x.at), x.seq))
    if steps:
        parts.append("Severity: " + ", ".join(f"{t.severity(x.severity)} at {s.stamp(x.at)}" for x in steps[:12]) + ".")
    reached = [m for m in report.milestones if m.reached and m.at]
    if reached:
        parts.append("Milestones: " + "; ".join(f"{m.label} at {s.stamp(m.at or '')}" for m in reached) + ".")
    parts.append(_alerts_in_words(report, s))
    parts.append(_actions_in_words(report, s))
    return " ".join(p for p in parts if p)


def _alerts_in_words(report: Report, s: Scale) -> str:
    alerts = sorted(report.impact.alerts, key=lambda a: (seconds(a.first_at), a.fingerprint))
    if not alerts:
        return "No alerts."
    resolved = sum(1 for a in alerts if a.resolved_at)
    head = f"{len(alerts)} alert(s), {resolved} resolved, {len(alerts) - resolved} still firing at the end of the log"
    if len(alerts) > MAX_ALERT_LANES:
        return head + " (aggregated: the lane shows how many fire at once)."
    each = [
        f"{clip(a.title, 60)} fired {s.stamp(a.first_at)}"
        + (f", resolved {s.stamp(a.resolved_at)}" if a.resolved_at else ", not resolved")
        for a in alerts
    ]
    return head + ": " + "; ".join(each) + "."


def _actions_in_words(report: Report, s: Scale) -> str:
    lines = [a for a in report.actions if a.proposal or a.runs]
    if not lines:
        return "No actions."
    each = []
    for line in lines[:MAX_ACTION_LANES]:
        bits = [f"proposed {s.stamp(line.proposal.at)} ({t.words(line.proposal.status)})"] if line.proposal else []
        for run in line.runs[:3]:
            verified = f", {run.verification}" if run.verification else ""
            bits.append(f"ran {s.stamp(run.at)}: {t.words(run.outcome)}{verified}")
        bits += [f"and {len(line.runs) - 3} more runs"] if len(line.runs) > 3 else []
        each.append(f"{clip(line.action, 60)} " + ", ".join(bits))
    more = f"; and {len(lines) - MAX_ACTION_LANES} more" if len(lines) > MAX_ACTION_LANES else ""
    return f"{len(lines)} action(s): " + "; ".join(each) + more + "."
