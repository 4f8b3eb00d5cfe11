"""The chart's lanes, each drawn from the report onto a ``Canvas``: severity, milestones, alerts, actions, legend.

Up to ``MAX_ALERT_LANES`` alerts get a lane each (a bar from firing to resolved); more are aggregated into one lane,
a histogram of how many fire at once over ``ALERT_BINS`` bins, so hundreds of alerts cost at most that many rects.
Actions get a lane each up to ``MAX_ACTION_LANES``; the rest share one lane (merged markers keep it small).
"""

from __future__ import annotations

from collections.abc import Sequence

from decklog.core.reports import text as t
from decklog.core.reports.chart_canvas import LANE_H, Canvas, seconds, utc
from decklog.core.reports.chart_shapes import (
    ALERT_FILL,
    ALERT_LINE,
    CONNECTOR,
    INK,
    MILESTONE,
    OUTCOMES,
    SEVERITY_COLOURS,
    WHITE,
    clip,
    outcome_class,
    text_width,
)
from decklog.core.reports.model import AlertLine, Milestone, SeverityStep
from decklog.core.reports.model_actions import ActionLine, RunLine, VerificationLine

MAX_ALERT_LANES = 8
ALERT_BINS = 60
MAX_ACTION_LANES = 6
LABEL_CHARS = 27
MILESTONE_SHORT = {
    "declared": "Declared",
    "first_human_response": "1st response",
    "mitigated": "Mitigated",
    "resolved": "Resolved",
}


def severity_lane(c: Canvas, steps: Sequence[SeverityStep], resolved_at: str | None) -> None:
    """Severity over time: one segment per step, to the next step, the resolution, or the end of the log."""
    top = c.lane("Severity", hint="" if steps else "never set")
    end = seconds(resolved_at) if resolved_at else c.scale.last
    ordered = sorted(steps, key=lambda s: (seconds(s.at), s.seq))
    for i, step in enumerate(ordered):
        start = seconds(step.at)
        stop = seconds(ordered[i + 1].at) if i + 1 < len(ordered) else end
        x0, x1 = c.x(start), c.x(max(stop, start))
        fill, ink = SEVERITY_COLOURS.get(step.severity, SEVERITY_COLOURS[None])
        name = t.severity(step.severity)
        why = f": {clip(step.reason, 80)}" if step.reason else ""
        c.bar(
            x0,
            top + 4,
            x1,
            LANE_H - 8,
            fill,
            WHITE,
            title=f"{name} from {c.scale.stamp(step.at)} ({step.by.label()}{why})",
        )
        if x1 - x0 >= text_width(name, 10) + 6:
            c.label((x0 + x1) / 2, top + LANE_H / 2 + 4, name, fill=ink, anchor="middle", size="10", weight="bold")


def milestone_lane(c: Canvas, milestones: Sequence[Milestone]) -> None:
    """A diamond per reached milestone, a dashed guide through every lane, and a label on one of two rows."""
    reached = sorted((m for m in milestones if m.reached and m.at), key=lambda m: (seconds(m.at or ""), m.seq or 0))
    height = LANE_H + 12
    top = c.lane("Milestones", height, "" if reached else "none reached")
    y, row_end = top + height / 2, [float("-inf"), float("-inf")]
    for m in reached:
        at = m.at or ""
        x = c.x(seconds(at))
        c.guide(x)
        c.mark("diamond", x, y, MILESTONE, f"{m.label} at {c.scale.stamp(at)}")
        name = MILESTONE_SHORT.get(m.name, m.label)
        width = text_width(name, 10)
        start, anchor = (x + 7, "start") if c.fits(x + 7, name) else (x - 7, "end")
        left = start if anchor == "start" else start - width
        for row, baseline in enumerate((top + 10, top + height - 3)):
            if left > row_end[row] + 4:
                c.label(start, baseline, name, fill=MILESTONE, anchor=anchor, size="10")
                row_end[row] = left + width
                break


def alert_lanes(c: Canvas, alerts: Sequence[AlertLine]) -> None:
    ordered = sorted(alerts, key=lambda a: (seconds(a.first_at), a.fingerprint))
    if not ordered:
        c.lane("Alerts", hint="no alerts recorded")
    elif len(ordered) <= MAX_ALERT_LANES:
        for alert in ordered:
            _alert_lane(c, alert)
    else:
        _alert_histogram(c, ordered)


def _alert_end(c: Canvas, alert: AlertLine) -> float:
    return seconds(alert.resolved_at) if alert.resolved_at else c.scale.last


def _alert_lane(c: Canvas, alert: AlertLine) -> None:
    top = c.lane(clip(alert.title, LABEL_CHARS))
    y, start = top + LANE_H / 2, seconds(alert.first_at)
    x0, x1 = c.x(start), c.x(max(_alert_end(c, alert), start))
    where = ", ".join(p for p in (alert.service, alert.source) if p)
    about = f"{alert.title}" + (f" ({where})" if where else "") + f", {alert.notifications} notification(s)"
    open_end = alert.resolved_at is None
    c.bar(x0, top + 7, x1, LANE_H - 14, ALERT_FILL, ALERT_LINE, dash="4 2" if open_end else "", title=about)
    c.mark("triangle_up", x0, y, ALERT_LINE, f"fired {c.scale.stamp(alert.first_at)}: {alert.title}")
    if alert.resolved_at:
        c.mark(
            OUTCOMES["ok"][0], x1, y, OUTCOMES["ok"][1], f"resolved {c.scale.stamp(alert.resolved_at)}: {alert.title}"
        )
    elif c.fits(x1 + 6, "still firing"):
        c.label(x1 + 6, y + 4, "still firing", fill=ALERT_LINE, size="10")


def _alert_histogram(c: Canvas, alerts: Sequence[AlertLine]) -> None:
    """How many alerts fire at once, per bin over the domain: the lane for hundreds of alerts."""
    s = c.scale
    width = (s.t1 - s.t0) / ALERT_BINS
    counts = [0] * ALERT_BINS
    for alert in alerts:
        start = seconds(alert.first_at)
        first = _bin(start, s.t0, width)
        last = _bin(max(_alert_end(c, alert), start), s.t0, width)
        for b in range(first, last + 1):
            counts[b] += 1
    peak = max(counts)
    height = LANE_H + 22  # the top 14 hold the peak's label
    top = c.lane(f"Alerts ({len(alerts)}, aggregated)", height)
    for b, count in enumerate(counts):
        if not count:
            continue
        lo, hi = s.t0 + b * width, s.t0 + (b + 1) * width
        h = max(2.0, count / peak * (height - 18))
        fmt = "%H:%M:%S" if s.one_day else "%Y-%m-%d %H:%M"
        span = f"{utc(lo, fmt)}–{utc(hi, fmt)}"
        c.bar(c.x(lo), top + height - 4 - h, c.x(hi) - 0.5, h, ALERT_FILL, ALERT_LINE, title=f"{span}: {count} firing")
    at = counts.index(peak)
    c.label(c.x(s.t0 + (at + 0.5) * width), top + 10, f"peak {peak} firing", fill=INK, anchor="middle", size="10")


def _bin(t0: float, origin: float, width: float) -> int:
    return min(ALERT_BINS - 1, max(0, int((t0 - origin) // width)))


def action_lanes(c: Canvas, actions: Sequence[ActionLine], verifications: Sequence[VerificationLine]) -> None:
    lines = sorted((a for a in actions if a.proposal or a.runs), key=_first_at)
    if not lines:
        c.lane("Actions", hint="no actions")
        return
    by_run: dict[str, list[VerificationLine]] = {}
    for v in verifications:
        by_run.setdefault(v.run_id, []).append(v)
    shown = lines if len(lines) <= MAX_ACTION_LANES else lines[: MAX_ACTION_LANES - 1]
    for line in shown:
        risk = f" ({line.risk})" if line.risk else ""
        _action_lane(c, clip(line.action, LABEL_CHARS - len(risk)) + risk, [line], by_run)
    rest = lines[len(shown) :]
    if rest:
        _action_lane(c, f"{len(rest)} more actions", rest, by_run)


def _first_at(line: ActionLine) -> float:
    times = [seconds(line.proposal.at)] if line.proposal else []
    return min(times + [seconds(r.at) for r in line.runs])


def _action_lane(c: Canvas, label: str, lines: Sequence[ActionLine], by_run: dict[str, list[VerificationLine]]) -> None:
    top = c.lane(label)
    y = top + LANE_H / 2
    words, left, right = "", float("inf"), float("-inf")
    for line in lines:
        p = line.proposal
        if p:
            x = c.x(seconds(p.at))
            bad = outcome_class(p.status) == "bad"
            shape, colour, _ = OUTCOMES["bad" if bad else "neutral"]
            who = p.by.label() if p.proposer in ("", p.by.id) else p.proposer
            c.mark(shape, x, y, colour, f"proposed {c.scale.stamp(p.at)} by {who}: {line.action}, {t.words(p.status)}")
            left = min(left, x)
            if x >= right:
                words, right = t.words(p.status), x
        for run in line.runs:
            if p:
                c.connect(c.x(seconds(p.at)), c.x(seconds(run.at)), y)
            start, end, text = _run(c, run, by_run.get(run.run_id, ()), y)
            left = min(left, start)
            if end >= right:
                words, right = text, end
    _outcome_words(c, words, left, right, y)


def _outcome_words(c: Canvas, words: str, left: float, right: float, y: float) -> None:
    """The lane's last outcome in words, after its last marker, or before its first when the right has no room."""
    if words and c.fits(right + 8, words):
        c.label(right + 8, y + 4, words, fill=INK, size="10")
    elif words and left - 8 - text_width(words, 10) >= c.scale.left:
        c.label(left - 8, y + 4, words, fill=INK, anchor="end", size="10")


def _run(c: Canvas, run: RunLine, verifications: Sequence[VerificationLine], y: float) -> tuple[float, float, str]:
    """A run's bar from its start to its last result, a marker per result and per verification."""
    start = seconds(run.at)
    times = [start] + [seconds(r.at) for r in run.results] + [seconds(v.at) for v in verifications]
    x0, x1 = c.x(start), c.x(max(times))
    c.bar(x0, y - 2, x1, 4, CONNECTOR, title=f"run {run.run_id} ({run.action}) started {c.scale.stamp(run.at)}")
    c.tick(x0, y)
    for res in run.results:
        shape, colour, _ = OUTCOMES[outcome_class(res.outcome)]
        error = f" ({clip(res.error, 80)})" if res.error else ""
        c.mark(
            shape,
            c.x(seconds(res.at)),
            y,
            colour,
            f"{run.action}: {t.words(res.outcome)} {c.scale.stamp(res.at)}{error}",
        )
    if not run.results:
        shape, colour, _ = OUTCOMES["unsure"]
        c.mark(shape, x0, y, colour, f"{run.action}: no result recorded (run {run.run_id})")
    for v in verifications:
        shape, colour, _ = OUTCOMES[outcome_class(v.outcome)]
        seen = f": {clip(v.observed, 80)}" if v.observed else ""
        c.mark(shape, c.x(seconds(v.at)), y, colour, f"verification {v.outcome} {c.scale.stamp(v.at)}{seen}")
    text = t.words(run.outcome) + (f", {run.verification}" if run.verification else "")
    return x0, x1, text
