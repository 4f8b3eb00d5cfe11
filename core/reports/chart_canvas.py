"""The time scale, the axis ticks and the canvas the chart's lanes are drawn on (pure geometry, no SVG text).

The scale maps seconds since the epoch to x in the plot area. Ticks sit on UTC multiples of a "nice" step chosen so
that at most ``MAX_TICKS`` fit. The canvas hands out lanes top to bottom and keeps shapes in paint layers; markers
that would land on the same few pixels with the same shape and colour are merged into one (their tooltip says how
many), which bounds the SVG's size whatever the number of alerts or results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime

from decklog.core.clock import parse_iso
from decklog.core.reports.chart_shapes import (
    CONNECTOR,
    GRID,
    INK,
    LANE_BG,
    MILESTONE,
    MUTED,
    WHITE,
    Item,
    Label,
    Line,
    Rect,
    Shape,
    marker,
    num,
    text_width,
)

WIDTH = 960.0
LEFT = 176.0  # the lane labels' gutter
RIGHT = 24.0
TOP = 8.0
LANE_H = 26.0
LANE_GAP = 4.0
MAX_TICKS = 8
MIN_SPAN_S = 60.0  # a zero-duration incident is drawn on a one-minute axis
MERGE_PX = 4.0
_DAY = 86400
NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, _DAY)
NICE_DAYS = (1, 2, 7, 14, 30, 60, 90, 180, 365)


def seconds(at: str) -> float:
    """An ISO timestamp as seconds since the epoch (UTC)."""
    return parse_iso(at).timestamp()


def utc(t: float, fmt: str) -> str:
    return datetime.fromtimestamp(t, UTC).strftime(fmt)


@dataclass(frozen=True)
class Scale:
    """``t0``/``t1``: the drawn domain (the incident's span, padded); ``first``/``last``: what the log covers."""

    first: float
    last: float
    t0: float
    t1: float
    left: float = LEFT
    right: float = WIDTH - RIGHT

    @classmethod
    def over(cls, first: float, last: float) -> Scale:
        span = max(last - first, MIN_SPAN_S)
        middle = (first + last) / 2 if last - first < MIN_SPAN_S else None
        lo, hi = (middle - span / 2, middle + span / 2) if middle is not None else (first, last)
        pad = span * 0.02
        return cls(first, last, lo - pad, hi + pad)

    def x(self, t: float) -> float:
        return self.left + (t - self.t0) / (self.t1 - self.t0) * (self.right - self.left)

    @property
    def one_day(self) -> bool:
        return utc(self.first, "%Y-%m-%d") == utc(self.last, "%Y-%m-%d")

    def stamp(self, at: str) -> str:
        """A time for a tooltip or the description: the clock alone when the chart covers one UTC day."""
        return self.stamp_of(seconds(at))

    def stamp_of(self, t: float) -> str:
        return utc(t, "%H:%M:%S" if self.one_day else "%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class Tick:
    t: float
    label: str


def tick_step(span: float) -> int:
    """The smallest nice step (seconds) that gives at most ``MAX_TICKS`` ticks over ``span``."""
    for step in NICE_STEPS:
        if span / step <= MAX_TICKS:
            return step
    for days in NICE_DAYS:
        if span / (days * _DAY) <= MAX_TICKS:
            return days * _DAY
    return math.ceil(span / MAX_TICKS / (365 * _DAY)) * 365 * _DAY


def ticks(scale: Scale) -> tuple[Tick, ...]:
    """Ticks on UTC multiples of the step inside the domain; a tick on a new day shows the date too."""
    step = tick_step(scale.t1 - scale.t0)
    fmt = "%H:%M:%S" if step < 60 else ("%H:%M" if step < _DAY else "%Y-%m-%d")
    out: list[Tick] = []
    t = math.ceil(scale.t0 / step) * step
    previous_day = ""
    while t <= scale.t1:
        day = utc(t, "%m-%d")
        label = utc(t, fmt)
        if step < _DAY and not scale.one_day and day != previous_day:
            label = f"{day} {label}"
        out.append(Tick(float(t), label))
        previous_day = day
        t += step
    return tuple(out)


@dataclass
class _Merged:
    shape: Shape
    x: float
    y: float
    colour: str
    titles: list[str] = field(default_factory=list)


class Canvas:
    """Lanes top to bottom; shapes in paint order: lane backgrounds, grid, bars, markers, text."""

    def __init__(self, scale: Scale) -> None:
        self.scale = scale
        self.y = TOP
        self.lanes: list[tuple[str, float, float]] = []  # (label, top, height)
        self.back: list[Item] = []
        self.grid: list[Item] = []
        self.bars: list[Item] = []
        self.text: list[Item] = []
        self._marks: dict[tuple[Shape, str, int, int], _Merged] = {}
        self._guides: list[float] = []
        self.legend: list[Item] = []

    def x(self, t: float) -> float:
        return self.scale.x(t)

    def lane(self, label: str, height: float = LANE_H, hint: str = "") -> float:
        """A new lane with its label in the gutter; returns its top."""
        top = self.y
        shade = LANE_BG if len(self.lanes) % 2 == 0 else WHITE
        self.back.append(
            Rect(num(self.scale.left), num(top), num(self.scale.right - self.scale.left), num(height), shade)
        )
        self.text.append(Label(num(self.scale.left - 8), num(top + height / 2 + 4), label, INK, "end"))
        if hint:
            self.text.append(Label(num(self.scale.left + 6), num(top + height / 2 + 4), hint, MUTED, size="10"))
        self.lanes.append((label, top, height))
        self.y = top + height + LANE_GAP
        return top

    def bar(self, x0: float, y: float, x1: float, h: float, fill: str, stroke: str = "none", **kw: str) -> None:
        self.bars.append(Rect(num(x0), num(y), num(max(x1 - x0, 2.0)), num(h), fill, stroke, **kw))

    def guide(self, x: float) -> None:
        """A dashed vertical line through every lane (drawn once the lanes are known)."""
        self._guides.append(x)

    def connect(self, x0: float, x1: float, y: float) -> None:
        """A dotted line from a proposal to the run it led to."""
        self.bars.append(Line(num(x0), num(y), num(x1), num(y), CONNECTOR, "2 2"))

    def tick(self, x: float, y: float) -> None:
        """A run's start: a short upright stroke."""
        self.bars.append(Line(num(x), num(y - 6), num(x), num(y + 6), INK, width="1.5"))

    def label(self, x: float, y: float, text: str, **kw: str) -> None:
        self.text.append(Label(num(x), num(y), text, **kw))

    def fits(self, x: float, text: str, size: float = 10.0) -> bool:
        """Whether ``text`` starting at ``x`` ends inside the plot area."""
        return x + text_width(text, size) <= self.scale.right

    def mark(self, shape: Shape, x: float, y: float, colour: str, title: str) -> None:
        key = (shape, colour, round(x / MERGE_PX), round(y))
        merged = self._marks.setdefault(key, _Merged(shape, x, y, colour))
        merged.titles.append(title)

    def marks(self) -> list[Item]:
        out: list[Item] = []
        for m in self._marks.values():
            title = m.titles[0]
            if len(m.titles) > 1:
                title = f"{len(m.titles)} here: " + "; ".join(m.titles[:3]) + ("; …" if len(m.titles) > 3 else "")
            out.append(marker(m.shape, m.x, m.y, m.colour, title))
        return out

    def axis(self, legend_top_gap: float = 30.0) -> float:
        """Grid lines and the time axis under the lanes; returns the y where the legend starts."""
        s, bottom = self.scale, self.y
        self.grid.append(Line(num(s.left), num(bottom), num(s.right), num(bottom), INK))
        for x in self._guides:
            self.grid.append(Line(num(x), num(TOP), num(x), num(bottom), MILESTONE, "3 3"))
        for tick in ticks(s):
            x = s.x(tick.t)
            self.grid.append(Line(num(x), num(TOP), num(x), num(bottom), GRID))
            self.grid.append(Line(num(x), num(bottom), num(x), num(bottom + 4), INK))
            if x - text_width(tick.label, 10) / 2 >= s.left - 2:  # never under the gutter's date
                self.text.append(Label(num(x), num(bottom + 16), tick.label, MUTED, "middle", "10"))
        dates = utc(s.first, "%Y-%m-%d") if s.one_day else f"{utc(s.first, '%Y-%m-%d')} → {utc(s.last, '%Y-%m-%d')}"
        self.text.append(Label(num(s.left - 8), num(bottom + 16), f"UTC, {dates}", MUTED, "end", "10"))
        return bottom + legend_top_gap

    def items(self) -> tuple[Item, ...]:
        return (*self.back, *self.grid, *self.bars, *self.marks(), *self.text, *self.legend)
