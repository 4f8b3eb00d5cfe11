"""The on-call doors of the REST API: who is on call (``GET /api/oncall``) and each schedule's shifts as an
iCalendar feed (``GET /api/oncall/<schedule>.ics``) that people subscribe to in their own calendar.

``GET /api/oncall`` → ``{"now", "schedules": [{"name", "timezone", "on_call", "until", "layers",
"overrides"}], "policies": [...], "routes": [...]}``; ``?schedule=<name>`` limits it to one (404 when unknown).
The feed lists the shifts from 7 days back to ``days`` ahead (default 28, at most 90), one VEVENT per shift, with
a stable UID per (schedule, start, user) so a calendar that refreshes updates events instead of doubling them.
Both go through the API's guard (method, bearer token or loopback only) from adapters/http/api.py.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web
from icalendar import Calendar, Event

from decklog.adapters.http.openapi import Answer, ApiDescription, Operation, PathParam
from decklog.core.clock import Clock, iso
from decklog.core.errors import InvalidInput, NotFound
from decklog.core.oncall.desk import read_overrides
from decklog.core.oncall.rotation import next_handoff, on_call, shifts
from decklog.core.oncall.setup import OncallConfig, Schedule, format_duration
from decklog.core.store.ports import LogStore

Handler = Callable[[web.Request], Any]
BACK_DAYS = 7
MAX_DAYS = 90


class OncallApi:
    def __init__(self, store: LogStore, clock: Clock, setup: OncallConfig) -> None:
        self.store = store
        self.clock = clock
        self.setup = setup

    async def summary(self, schedule: Schedule, now: datetime) -> dict[str, Any]:
        overrides = await read_overrides(self.store, schedule.name)
        until = next_handoff(schedule, now, overrides)
        return {
            "name": schedule.name,
            "timezone": schedule.timezone,
            "on_call": on_call(schedule, now, overrides),
            "until": iso(until) if until else None,
            "layers": [
                {"users": list(lv.users), "rotation": format_duration(lv.rotation), "start": lv.start}
                for lv in schedule.layers
            ],
            "overrides": [{"user": o.user, "start": iso(o.start), "end": iso(o.end)} for o in overrides if o.end > now],
        }

    async def oncall(self, request: web.Request) -> web.StreamResponse:
        now = self.clock.now()
        wanted = request.query.get("schedule")
        chosen = list(self.setup.schedules)
        if wanted is not None:
            found = self.setup.schedule(wanted)
            if found is None:
                raise NotFound(f"no schedule {wanted!r}")
            chosen = [found]
        body = {
            "now": iso(now),
            "schedules": [await self.summary(s, now) for s in chosen],
            "policies": [
                {
                    "name": p.name,
                    "repeat": p.repeat,
                    "levels": [{"targets": list(lv.targets), "after": format_duration(lv.after)} for lv in p.levels],
                }
                for p in self.setup.policies
            ],
            "routes": [r.model_dump(mode="json") for r in self.setup.routes],
        }
        return web.json_response(body)

    async def feed(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        schedule = self.setup.schedule(name)
        if schedule is None:
            raise NotFound(f"no schedule {name!r}")
        raw = request.query.get("days", "28")
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_DAYS:
            raise InvalidInput(f"days must be a whole number from 1 to {MAX_DAYS}, not {raw!r}", field="days")
        return web.Response(
            body=await self.calendar(schedule, int(raw)),
            headers={"Content-Type": "text/calendar; charset=utf-8"},
        )

    async def calendar(self, schedule: Schedule, days: int) -> bytes:
        now = self.clock.now()
        start = (now - timedelta(days=BACK_DAYS)).replace(microsecond=0)
        overrides = await read_overrides(self.store, schedule.name)
        cal = Calendar()
        cal.add("prodid", "-//decklog//on-call//EN")
        cal.add("version", "2.0")
        cal.add("x-wr-calname", f"On call: {schedule.name}")
        cal.add("x-wr-timezone", schedule.timezone)
        for shift in shifts(schedule, start, now + timedelta(days=days), overrides):
            event = Event()
            event.add("uid", f"{schedule.name}-{shift.start.strftime('%Y%m%dT%H%M%SZ')}-{shift.user}@decklog")
            event.add("dtstamp", now.replace(microsecond=0))
            event.add("dtstart", shift.start)
            event.add("dtend", shift.end)
            event.add("summary", f"On call: {shift.user} ({schedule.name})")
            event.add("description", f"{shift.source} of schedule {schedule.name}")
            event.add("attendee", f"urn:slack:{shift.user}")
            cal.add_component(event)
        data: bytes = cal.to_ical()
        return data


def routes(api: OncallApi, guard: Callable[[Handler], Handler]) -> list[tuple[str, str, Handler]]:
    """(method, path, handler), each through ``guard`` (the REST API's method and token check)."""
    return [
        ("*", "/api/oncall", guard(api.oncall)),
        ("*", "/api/oncall/{name}.ics", guard(api.feed)),
    ]


def describe(description: ApiDescription) -> None:
    """Registers the on-call routes in the API's OpenAPI description."""
    description.add(
        Operation(
            "GET",
            "/api/oncall",
            "Who is on call now, per schedule, with the overrides in force",
            "read",
            {200: Answer("the schedules and who is on call in each", schema={"type": "object"})},
            tag="oncall",
        )
    )
    description.add(
        Operation(
            "GET",
            "/api/oncall/{name}.ics",
            "A schedule's shifts as an iCalendar feed",
            "read",
            {200: Answer("the calendar", media="text/calendar", schema={"type": "string"})},
            params=(PathParam("name", {"type": "string"}),),
            tag="oncall",
        )
    )
