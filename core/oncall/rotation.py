"""Who is on call: a schedule's layers, rotations and overrides evaluated at a moment, and its shifts over a window.

A layer with ``users`` [a, b, c], ``rotation`` r and ``start`` s has a on call from s to s+r, b to s+2r, and so on,
round the list; before s it has nobody. Where layers overlap the later one wins (a layer in the file after another
takes precedence). An override (``/incident oncall override``, an ``oncall_override`` entry in the schedule's
``oncall/<name>`` scope) wins over every layer for its span; the latest override wins among overlapping ones.

Pure functions of the configuration, the overrides and the time asked about: two replicas (or a replay) asking
"who was on call at 03:00" get the same answer, which is what lets an escalation level name its target when it
falls due instead of when it was planned.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from decklog.core.oncall.setup import Layer, Schedule, parse_when

#: The most shifts a window lists (a rotation of seconds over a month would otherwise be millions).
MAX_SHIFTS = 2000


@dataclass(frozen=True)
class Override:
    user: str
    start: datetime
    end: datetime
    seq: int = 0  # later entries win among overlapping overrides


@dataclass(frozen=True)
class Shift:
    user: str
    start: datetime
    end: datetime
    source: str  # "layer 1" (counted from 1), "override"


def _layer_at(layer: Layer, schedule: Schedule, at: datetime) -> tuple[str, datetime, datetime] | None:
    """The layer's user at ``at`` and the span of that turn, or None before the layer starts."""
    start = parse_when(layer.start, schedule.tz)
    if at < start:
        return None
    turn = math.floor((at - start).total_seconds() / layer.rotation)
    begins = start + timedelta(seconds=turn * layer.rotation)
    return layer.users[turn % len(layer.users)], begins, begins + timedelta(seconds=layer.rotation)


def on_call(schedule: Schedule, at: datetime, overrides: Sequence[Override] = ()) -> str | None:
    """The user on call in ``schedule`` at ``at`` (None: nobody)."""
    covering = [o for o in overrides if o.start <= at < o.end]
    if covering:
        return max(covering, key=lambda o: o.seq).user
    who = None
    for layer in schedule.layers:
        found = _layer_at(layer, schedule, at)
        if found is not None:
            who = found[0]
    return who


def _boundaries(schedule: Schedule, start: datetime, end: datetime, overrides: Sequence[Override]) -> list[datetime]:
    points = {start}
    for layer in schedule.layers:
        first = parse_when(layer.start, schedule.tz)
        if first >= end:
            continue
        step = layer.rotation
        n = max(0, math.ceil((start - first).total_seconds() / step))
        at = first + timedelta(seconds=n * step)
        while at < end and len(points) < MAX_SHIFTS * 2:
            points.add(at)
            at += timedelta(seconds=step)
    for o in overrides:
        for at in (o.start, o.end):
            if start < at < end:
                points.add(at)
    return sorted(points)


def shifts(schedule: Schedule, start: datetime, end: datetime, overrides: Sequence[Override] = ()) -> list[Shift]:
    """Who is on call from ``start`` to ``end``, as consecutive shifts (a person's adjacent turns merged; gaps with
    nobody on call left out), at most ``MAX_SHIFTS``. The shift under way at ``start`` keeps its real beginning, so
    a feed asked for at another moment lists the same shifts."""
    out: list[Shift] = []
    begins = [o.start for o in overrides if o.start <= start < o.end]
    for layer in schedule.layers:
        turn = _layer_at(layer, schedule, start)
        if turn is not None:
            begins.append(turn[1])
    points = _boundaries(schedule, min([start, *begins]), end, overrides)
    for i, at in enumerate(points):
        until = points[i + 1] if i + 1 < len(points) else end
        user = on_call(schedule, at, overrides)
        if user is None:
            continue
        source = "override" if any(o.start <= at < o.end for o in overrides) else _source(schedule, at)
        if out and out[-1].user == user and out[-1].end == at and out[-1].source == source:
            out[-1] = Shift(user, out[-1].start, until, source)
        else:
            if len(out) >= MAX_SHIFTS:
                break
            out.append(Shift(user, at, until, source))
    return out


def _source(schedule: Schedule, at: datetime) -> str:
    found = ""
    for i, layer in enumerate(schedule.layers, start=1):
        if _layer_at(layer, schedule, at) is not None:
            found = f"layer {i}"
    return found


def next_handoff(schedule: Schedule, after: datetime, overrides: Sequence[Override] = ()) -> datetime | None:
    """The first moment after ``after`` when the person on call changes (None: never, within a year)."""
    now = on_call(schedule, after, overrides)
    horizon = after + timedelta(days=366)
    for at in _boundaries(schedule, after, horizon, overrides)[1:]:
        if on_call(schedule, at, overrides) != now:
            return at
    return None
