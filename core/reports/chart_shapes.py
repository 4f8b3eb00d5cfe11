"""The small model of shapes the report's timeline chart is drawn from (``core/reports/chart.py`` lays it out).

Every coordinate is a string formatted here (``num``: at most one decimal, no ``-0``), so the SVG bytes never
depend on float repr or locale. Colours are presentation attributes, not CSS: the SVG stays self-contained when
copied out of the page. Meaning never rests on colour alone: each outcome class has its own marker shape, and
severity segments carry their ``SEV<n>`` label.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

INK = "#1d1d1f"
MUTED = "#5f6368"
GRID = "#d9dce1"
LANE_BG = "#f6f8fa"
WHITE = "#ffffff"
MILESTONE = "#0969da"
ALERT_FILL = "#ffebe9"
ALERT_LINE = "#cf222e"
CONNECTOR = "#8c959f"

# severity → (fill, text colour): SEV1 darkest red … SEV4 grey; unknown is light grey
SEVERITY_COLOURS: dict[int | None, tuple[str, str]] = {
    1: ("#a40e26", WHITE),
    2: ("#e8590c", WHITE),
    3: ("#f2c744", INK),
    4: ("#6e7781", WHITE),
    None: ("#d0d7de", INK),
}

Shape = Literal["triangle_up", "triangle_down", "circle", "cross", "square", "diamond"]
OutcomeClass = Literal["ok", "bad", "unsure", "neutral"]

# outcome class → (marker shape, colour, legend words)
OUTCOMES: dict[OutcomeClass, tuple[Shape, str, str]] = {
    "ok": ("circle", "#1a7f37", "applied / verified"),
    "bad": ("cross", "#cf222e", "failed / refused / denied"),
    "unsure": ("triangle_down", "#9a6700", "uncertain / no result / inconclusive"),
    "neutral": ("square", "#57606a", "proposed / skipped / closed"),
}
_OK = frozenset({"applied", "verified", "approved", "ran", "compensated"})
_BAD = frozenset({"failed", "refused", "not_applied", "denied"})
_UNSURE = frozenset({"uncertain", "abandon_uncertain", "inconclusive", "no result recorded"})


def outcome_class(outcome: str) -> OutcomeClass:
    """What an action, proposal or verification outcome means at a glance."""
    if outcome in _OK:
        return "ok"
    if outcome in _BAD:
        return "bad"
    if outcome in _UNSURE:
        return "unsure"
    return "neutral"


def num(value: float) -> str:
    """A coordinate as text: rounded to one decimal, ``12`` not ``12.0``, never ``-0``."""
    if not math.isfinite(value):
        raise ValueError(f"not a finite coordinate: {value!r}")
    text = f"{round(value, 1):.1f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


@dataclass(frozen=True)
class Rect:
    x: str
    y: str
    w: str
    h: str
    fill: str
    stroke: str = "none"
    dash: str = ""
    title: str = ""
    kind: str = "rect"


@dataclass(frozen=True)
class Mark:
    """A marker as a path (``d``); ``title`` is its tooltip and accessible name."""

    d: str
    fill: str
    stroke: str
    stroke_width: str
    title: str = ""
    kind: str = "mark"


@dataclass(frozen=True)
class Line:
    x1: str
    y1: str
    x2: str
    y2: str
    stroke: str
    dash: str = ""
    width: str = "1"
    kind: str = "line"


@dataclass(frozen=True)
class Label:
    x: str
    y: str
    text: str
    fill: str = INK
    anchor: str = "start"
    size: str = "11"
    weight: str = "normal"
    kind: str = "text"


Item = Rect | Mark | Line | Label


def marker(shape: Shape, x: float, y: float, colour: str, title: str = "", r: float = 5.0) -> Mark:
    """A marker centred on (x, y): filled shapes, except the hollow square and the stroked cross."""
    a, b, s, k = num(x), num(y), num(r), r * 0.8
    if shape == "triangle_up":
        d = f"M{a} {num(y - r)}L{num(x + r)} {num(y + k)}L{num(x - r)} {num(y + k)}Z"
    elif shape == "triangle_down":
        d = f"M{a} {num(y + r)}L{num(x + r)} {num(y - k)}L{num(x - r)} {num(y - k)}Z"
    elif shape == "circle":
        d = f"M{num(x - r)} {b}a{s} {s} 0 1 0 {num(2 * r)} 0a{s} {s} 0 1 0 {num(-2 * r)} 0Z"
    elif shape == "cross":
        d = f"M{num(x - k)} {num(y - k)}l{num(2 * k)} {num(2 * k)}M{num(x + k)} {num(y - k)}l{num(-2 * k)} {num(2 * k)}"
        return Mark(d, "none", colour, "2.2", title)
    elif shape == "square":
        d = f"M{num(x - k)} {num(y - k)}h{num(2 * k)}v{num(2 * k)}h{num(-2 * k)}Z"
        return Mark(d, WHITE, colour, "1.8", title)
    else:  # diamond
        d = f"M{a} {num(y - r)}L{num(x + r)} {b}L{a} {num(y + r)}L{num(x - r)} {b}Z"
    return Mark(d, colour, WHITE, "1", title)


def clip(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters (an ellipsis marks a cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def text_width(text: str, size: float = 11.0) -> float:
    """A deliberately generous estimate of a label's width (no font metrics: the layout must be deterministic)."""
    return len(text) * size * 0.6
