"""The HTML report's timeline chart: its geometry (core/reports/chart*.py), its edge cases, and the SVG it renders.

Geometry tests build ``Report`` models directly (the golden 03:12 report, or small ones made here); the rendering
tests go through the real store and the CLI. The SVG is checked without a browser: it parses as XML, has a
``<title>``/``<desc>``, and contains no script, event handler or external reference.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from decklog.core.clock import iso
from decklog.core.entries import Actor
from decklog.core.reports import ReportTemplateError, ReportTemplates, render
from decklog.core.reports.chart import Chart, timeline_chart
from decklog.core.reports.chart_canvas import MAX_TICKS, WIDTH, Scale, seconds, tick_step, ticks
from decklog.core.reports.chart_lanes import ALERT_BINS, MAX_ACTION_LANES, MAX_ALERT_LANES
from decklog.core.reports.chart_shapes import MILESTONE, Label, Line, Mark, Rect, num, outcome_class
from decklog.core.reports.model import (
    AlertLine,
    Impact,
    Integrity,
    Milestone,
    Report,
    SeverityStep,
    Summary,
    TimelineLine,
    TurnTotals,
)
from decklog.core.reports.model_actions import ActionLine, ProposalLine, ResultLine, RunLine
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.e2e.test_export import scope
from tests.unit.test_report_templates import cli
from tests.unit.test_reports import GOLDEN, fixed_ids, report_bytes, store, write_story

__all__ = ["fixed_ids", "scope", "store"]  # fixtures

SVG = "{http://www.w3.org/2000/svg}"
T0 = datetime(2026, 9, 19, 3, 12, tzinfo=UTC)
SYSTEM = Actor.system("alertmanager")


def at(seconds_after: float) -> str:
    return iso(T0 + timedelta(seconds=seconds_after))


def golden_report() -> Report:
    return Report.model_validate(json.loads((GOLDEN / "payments-5xx.json").read_text(encoding="utf-8")))


def bare(**impact: Any) -> Report:
    """A report of a declaration and nothing else (plus what ``impact`` adds)."""
    line = TimelineLine(
        scope="incident/x", seq=1, at=at(0), offset_s=0.0, origin="system", actor=SYSTEM, kind="declared", text="x"
    )
    return Report(
        scope="incident/x",
        summary=Summary(scope="incident/x", kind="incident", title="X", status="open", declared_at=at(0)),
        impact=Impact(**impact),
        milestones=(Milestone(name="declared", label="Declared", reached=True, seq=1, at=at(0)),),
        timeline=(line,),
        decisions=(),
        inferences=(),
        actions=(),
        verifications=(),
        fence_rejections=(),
        compensations=(),
        open_questions=(),
        obligations=(),
        follow_ups=(),
        participants=(),
        agent_turns=(),
        agent_totals=TurnTotals(),
        integrity=(Integrity(scope="incident/x", checked=True, ok=True, last_seq=1),),
        linked_scopes=(),
    )


def chart_of(report: Report) -> Chart:
    chart = timeline_chart(report)
    assert chart is not None
    return chart


def texts(chart: Chart) -> list[str]:
    return [i.text for i in chart.items if isinstance(i, Label)]


def titled(chart: Chart, prefix: str) -> list[Rect | Mark]:
    return [i for i in chart.items if isinstance(i, Rect | Mark) and i.title.startswith(prefix)]


def inside(chart: Chart) -> None:
    """Every coordinate is a finite number inside the chart."""
    w, h = float(chart.width), float(chart.height)
    for item in chart.items:
        xs = [item.x1, item.x2] if isinstance(item, Line) else ([] if isinstance(item, Mark) else [item.x])
        ys = [item.y1, item.y2] if isinstance(item, Line) else ([] if isinstance(item, Mark) else [item.y])
        if isinstance(item, Mark):
            pairs = re.findall(r"[ML](-?[\d.]+) (-?[\d.]+)", item.d)  # the absolute points
            xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
        assert all(-1 <= float(x) <= w + 1 for x in xs), item
        assert all(-1 <= float(y) <= h + 1 for y in ys), item


# -- geometry ----------------------------------------------------------------------------------------------------


def test_the_0312_story_has_a_lane_per_thing_in_time_order() -> None:
    report = golden_report()
    chart = chart_of(report)
    assert chart.width == num(WIDTH) and chart.title.startswith("Timeline of incident/payments-5xx")
    labels = texts(chart)
    for lane in ("Severity", "Milestones", "PaymentsHigh5xx firing: 12…", "rollback-deploy (R2)"):
        assert lane in labels
    assert [x for x in labels if re.fullmatch(r"\d\d:\d\d", x)] == ["03:15", "03:20", "03:25", "03:30"]
    assert "UTC, 2026-09-19" in labels
    sev2, sev1 = titled(chart, "SEV")
    assert isinstance(sev2, Rect) and isinstance(sev1, Rect)
    assert sev2.title.startswith("SEV2 from 03:12:00") and sev1.title.startswith("SEV1 from 03:14:30 (alice")
    assert float(sev2.x) + float(sev2.w) == pytest.approx(float(sev1.x), abs=0.2)  # one step follows the other
    assert {"SEV1", "SEV2"} <= set(labels)  # readable without colour
    diamonds = [m.title for m in chart.items if isinstance(m, Mark) and m.fill == MILESTONE and m.title]
    assert diamonds == [
        "Declared at 03:12:00",
        "First human response at 03:13:30",
        "Mitigated at 03:19:25",
        "Resolved at 03:28:56",
    ]
    assert [x.title.split(":")[0] for x in titled(chart, "fired")] == ["fired 03"]
    assert titled(chart, "resolved 03:23:25") and titled(chart, "verification verified 03:28:25")
    assert "applied, verified" in labels  # the action's outcome, in words
    inside(chart)


def test_the_description_says_what_the_picture_shows() -> None:
    desc = chart_of(golden_report()).desc
    assert desc.startswith("From 2026-09-19 03:12:00 to 03:29:56 UTC (17m 56s).")
    assert "SEV2 at 03:12:00, SEV1 at 03:14:30" in desc and "Resolved at 03:28:56" in desc
    assert "1 alert(s), 1 resolved" in desc and "rollback-deploy proposed 03:16:32 (ran)" in desc


def test_positions_follow_time_on_one_scale() -> None:
    scale = Scale.over(seconds(at(0)), seconds(at(600)))
    xs = [scale.x(seconds(at(s))) for s in (0, 60, 300, 600)]
    assert xs == sorted(xs) and scale.left < xs[0] and xs[-1] < scale.right  # padded both sides
    assert xs[2] - xs[0] == pytest.approx((xs[3] - xs[0]) / 2)


def test_a_zero_duration_incident_is_drawn_on_a_one_minute_axis() -> None:
    chart = chart_of(bare())
    labels = texts(chart)
    assert "no alerts recorded" in labels and "no actions" in labels and "never set" in labels
    assert len([x for x in labels if re.fullmatch(r"\d\d:\d\d:\d\d", x)]) >= 2  # seconds ticks around 03:12:00
    assert "Declared at 03:12:00" in [m.title for m in chart.items if isinstance(m, Mark)]
    assert chart.desc.startswith("From 2026-09-19 03:12:00 to 03:12:00 UTC (0s).")
    inside(chart)


def test_a_report_with_nothing_in_time_has_no_chart() -> None:
    empty = bare().model_copy(
        update={"timeline": (), "milestones": (), "summary": Summary(scope="s", kind="k", title="t", status="open")}
    )
    assert timeline_chart(empty) is None
    assert b"Timeline chart" not in render(empty, "html")


def test_a_six_week_incident_has_dated_ticks_and_an_open_alert() -> None:
    weeks = 6 * 7 * 86400
    alert = AlertLine(fingerprint="a", title="disk", first_at=at(0), last_at=at(weeks))
    steps = (
        SeverityStep(seq=1, at=at(0), severity=3, by=SYSTEM),
        SeverityStep(seq=9, at=at(weeks), severity=2, by=SYSTEM),
    )
    report = bare(alerts=(alert,), severity_history=steps)
    chart = chart_of(report)
    labels = texts(chart)
    dated = [x for x in labels if re.fullmatch(r"\d{4}-\d\d-\d\d", x)]
    assert 2 <= len(dated) <= MAX_TICKS + 1 and dated == sorted(dated)
    assert "UTC, 2026-09-19 → 2026-10-31" in labels
    bar = titled(chart, "disk")[0]
    assert isinstance(bar, Rect) and bar.dash  # unresolved: dashed, to the end of the log
    assert "still firing" in labels or float(bar.x) + float(bar.w) > 0.9 * WIDTH
    assert "2026-09-19 03:12:00" in chart.desc and "not resolved" in chart.desc
    inside(chart)


def test_hundreds_of_alerts_become_one_bounded_histogram_lane() -> None:
    alerts = tuple(
        AlertLine(fingerprint=f"fp-{i:03}", title=f"alert {i}", first_at=at(i), last_at=at(600), resolved_at=at(600))
        for i in range(500)
    )
    chart = chart_of(bare(alerts=alerts))
    assert "Alerts (500, aggregated)" in texts(chart)
    bins = [i for i in chart.items if isinstance(i, Rect) and i.title.endswith("firing")]
    assert 0 < len(bins) <= ALERT_BINS
    assert "peak 500 firing" in texts(chart)  # every alert fires until 03:22
    assert len(chart.items) < 150 and len(chart.desc) < 1200
    assert "500 alert(s), 500 resolved" in chart.desc
    inside(chart)


def test_a_few_alerts_get_a_lane_each() -> None:
    alerts = tuple(
        AlertLine(fingerprint=f"fp-{i}", title=f"alert {i}", first_at=at(i * 10), last_at=at(90))
        for i in range(MAX_ALERT_LANES)
    )
    labels = texts(chart_of(bare(alerts=alerts)))
    assert [x for x in labels if re.fullmatch(r"alert \d+", x)] == [f"alert {i}" for i in range(MAX_ALERT_LANES)]


def run(run_id: str, start: float, outcomes: list[str]) -> RunLine:
    results = tuple(
        ResultLine(seq=i + 2, at=at(start + 5 * (i + 1)), outcome=o, by=SYSTEM) for i, o in enumerate(outcomes)
    )
    return RunLine(
        run_id=run_id,
        action="restart",
        seq=1,
        at=at(start),
        started_by=SYSTEM,
        results=results,
        outcome=outcomes[-1] if outcomes else "no result recorded",
    )


def test_many_actions_share_a_lane_and_merge_markers() -> None:
    actions = tuple(
        ActionLine(action=f"restart-{i}", runs=(run(f"r{i}", i, ["failed", "applied"]),)) for i in range(300)
    )
    chart = chart_of(bare().model_copy(update={"actions": actions}))
    labels = texts(chart)
    assert f"{300 - MAX_ACTION_LANES + 1} more actions" in labels
    merged = [m for m in chart.items if isinstance(m, Mark) and re.match(r"\d+ here: ", m.title)]
    assert len(chart.desc) < 2000
    retries = ActionLine(action="retry", runs=tuple(run(f"r{i}", i, ["failed"]) for i in range(200)))
    assert "and 197 more runs" in chart_of(bare().model_copy(update={"actions": (retries,)})).desc
    assert merged and len(chart.items) < 1500
    inside(chart)


def test_outcomes_have_shapes_not_only_colours() -> None:
    proposal = ProposalLine(
        proposal_id="p",
        seq=1,
        at=at(0),
        by=SYSTEM,
        origin="system",
        proposer="alertmanager",
        action="x",
        risk="R2",
        status="denied",
    )
    actions = (
        ActionLine(action="x", proposal=proposal),
        ActionLine(action="y", runs=(run("r", 30, ["uncertain"]), run("s", 60, []))),
    )
    chart = chart_of(bare().model_copy(update={"actions": actions}))
    marks = {m.title.split(" ")[0]: m for m in chart.items if isinstance(m, Mark) and m.title}
    assert marks["proposed"].fill == "none"  # denied: a stroked cross
    assert "denied" in texts(chart)
    assert [outcome_class(o) for o in ("applied", "failed", "uncertain", "skipped")] == [
        "ok",
        "bad",
        "unsure",
        "neutral",
    ]


def test_ticks_use_nice_utc_steps() -> None:
    assert [tick_step(s) for s in (8, 60, 3600, 86400, 40 * 86400)] == [1, 10, 600, 10800, 7 * 86400]
    scale = Scale.over(seconds("2026-09-19T23:00:00Z"), seconds("2026-09-20T02:00:00Z"))
    labels = [t.label for t in ticks(scale)]
    assert "09-20 00:00" in labels and labels[0].startswith("09-19 ")  # a new UTC day shows its date


def test_numbers_are_formatted_one_way() -> None:
    assert [num(12.0), num(-0.04), num(3.14159), num(960)] == ["12", "0", "3.1", "960"]
    with pytest.raises(ValueError):
        num(float("nan"))


# -- the SVG in the page -----------------------------------------------------------------------------------------


def svg_of(html: str) -> ET.Element:
    start, end = html.index("<svg"), html.index("</svg>") + len("</svg>")
    return ET.fromstring(html[start:end])


async def test_the_svg_parses_as_xml_and_is_inert(store: SqliteLogStore) -> None:
    await write_story(store)
    html = (await report_bytes(store, "html")).decode()
    assert html.count("<svg") == 1 and "<h2>Timeline chart</h2>" in html
    svg = svg_of(html)
    assert svg.get("role") == "img" and svg.get("aria-labelledby") == "timeline-chart-title timeline-chart-desc"
    assert svg.find(f"{SVG}title") is not None and svg.find(f"{SVG}desc") is not None
    tags = {el.tag.removeprefix(SVG) for el in svg.iter()}
    assert tags <= {"svg", "title", "desc", "rect", "path", "line", "text"}, tags
    for el in svg.iter():
        for name in el.attrib:
            assert not name.lower().startswith("on"), (el.tag, name)
            assert "href" not in name.lower(), (el.tag, name)
    raw = html[html.index("<svg") : html.index("</svg>")]
    assert "<script" not in raw.lower() and "javascript:" not in raw.lower() and "url(" not in raw
    assert len(raw) < 20_000


def test_recorded_text_in_the_chart_is_escaped() -> None:
    report = golden_report()
    alert = report.impact.alerts[0].model_copy(update={"title": '<script>alert("x")</script> & <b onload=1>'})
    evil = report.model_copy(update={"impact": report.impact.model_copy(update={"alerts": (alert,)})})
    html = render(evil, "html").decode()
    svg = svg_of(html)  # still well-formed XML
    assert all(not a.startswith("on") for el in svg.iter() for a in el.attrib)
    assert "&lt;script&gt;" in html[html.index("<svg") :] and "<script" not in html


def test_the_chart_partial_is_checked_like_every_template(tmp_path: Path) -> None:
    (tmp_path / "html").mkdir()
    (tmp_path / "html" / "chart.j2").write_text("{{ timeline_chart(report).nope }}{{ chart_helper }}", encoding="utf-8")
    with pytest.raises(ReportTemplateError, match=r"html/chart.j2.*chart_helper"):
        render(golden_report(), "html", ReportTemplates(tmp_path))
    (tmp_path / "html" / "chart.j2").write_text("{{ timeline_chart(report).nope }}", encoding="utf-8")
    with pytest.raises(ReportTemplateError, match="nope"):
        render(golden_report(), "html", ReportTemplates(tmp_path))


async def test_re_export_gives_identical_bytes(tmp_path: Path, scope: str) -> None:
    (tmp_path / "decklog.toml").write_text("", encoding="utf-8")
    first = cli(tmp_path, "export", scope, "--format", "html")
    assert first.returncode == 0, first.stderr
    second = cli(tmp_path, "export", scope, "--format", "html")
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout and b"<svg" in first.stdout
