"""``decklog oncall import``: schedules and escalation policies from a tool that is leaving, as decklog's
``[oncall]`` configuration, and the list of what could not be mapped.

- **PagerDuty** (REST API v2 JSON: a ``schedule`` / ``schedules`` and an ``escalation_policy`` /
  ``escalation_policies``): each schedule layer becomes a layer (``rotation_virtual_start``,
  ``rotation_turn_length_seconds``, its users in order); each escalation rule a level (``escalation_delay_in_minutes``
  its ``after``; user and schedule references its targets); ``num_loops`` the policy's ``repeat``. Layer
  restrictions, layer ends, handoff notifications and services are listed as not mapped.
- **Opsgenie** (a schedule with its ``rotations``, as the Schedule and Schedule Rotation APIs give them): each
  rotation becomes a layer (``type`` × ``length`` its rotation; its user participants by username). Team, escalation
  and ``none`` participants, end dates, time restrictions and the owner team are listed as not mapped.
- **Grafana OnCall** (the List responses of ``schedules``, ``on_call_shifts``, ``escalation_chains`` and
  ``escalation_policies``): a ``calendar`` schedule's ``rolling_users`` and ``recurrent_event`` shifts become
  layers; an escalation chain becomes a policy whose notify steps are levels and whose ``wait`` steps are the
  levels' ``after``. iCal schedules, single events, by-day recurrences, user groups and webhooks are listed.

Vendor user ids are kept as they are (decklog needs Slack user ids): every one is listed, to be replaced. The
result is validated as an ``OncallConfig`` before it is printed, so what the importer prints starts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from decklog.core.errors import InvalidInput
from decklog.core.oncall.setup import OncallConfig, format_duration

HOUR, DAY, WEEK = 3600, 86_400, 604_800
OPSGENIE_UNITS = {"hourly": HOUR, "daily": DAY, "weekly": WEEK}
GRAFANA_UNITS = {"hourly": HOUR, "daily": DAY, "weekly": WEEK}


@dataclass
class Imported:
    schedules: list[dict[str, Any]] = field(default_factory=list)
    policies: list[dict[str, Any]] = field(default_factory=list)
    routes: list[dict[str, Any]] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)
    users: dict[str, str] = field(default_factory=dict)  # vendor user id → what the export calls them

    def oncall(self) -> dict[str, Any]:
        """The ``[oncall]`` table (validated: what is printed is a configuration decklog starts with)."""
        if not self.routes and self.policies:
            self.routes.append({"policy": self.policies[0]["name"], "default": True})
        table: dict[str, Any] = {}
        for key, value in (("schedules", self.schedules), ("policies", self.policies), ("routes", self.routes)):
            if value:
                table[key] = value
        try:
            OncallConfig.model_validate(table)
        except ValueError as exc:  # a bug in a mapping, never the user's input: say so plainly
            raise InvalidInput(f"the imported configuration does not validate: {exc}", field="file") from None
        return table

    def notes(self) -> list[str]:
        users = [f"user {uid} ({name})" if name and name != uid else f"user {uid}" for uid, name in self.users.items()]
        if users:
            return [*self.unmapped, "replace with Slack user ids: " + ", ".join(users)]
        return list(self.unmapped)


def slug(name: str) -> str:
    text = re.sub(r"[^A-Za-z0-9_.-]+", "-", name.strip().lower()).strip("-.")
    return text or "schedule"


def _obj(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InvalidInput(f"{what} must be a JSON object", field="file")
    return data


def _items(data: dict[str, Any], one: str, many: str) -> list[dict[str, Any]]:
    """``data[one]`` or ``data[many]`` (a list, or a paginated ``{"results": [...]}``)."""
    out: list[Any] = []
    if one in data:
        out.append(data[one])
    if many in data:
        found = data[many]
        if isinstance(found, dict):
            found = found.get("results", found.get("data", []))
        if not isinstance(found, list):
            raise InvalidInput(f"{many} must be a list", field=many)
        out += found
    return [_obj(x, one) for x in out]


# -- PagerDuty ------------------------------------------------------------------------------------------------------


def from_pagerduty(data: Any) -> Imported:
    data = _obj(data, "a PagerDuty export")
    out = Imported()
    schedules = _items(data, "schedule", "schedules")
    policies = _items(data, "escalation_policy", "escalation_policies")
    if not schedules and not policies:
        raise InvalidInput("no schedule(s) or escalation_policy(ies) in this PagerDuty export", field="file")
    names: dict[str, str] = {}
    for s in schedules:
        name = slug(str(s.get("name") or s.get("id") or "schedule"))
        names[str(s.get("id", ""))] = name
        layers = []
        for layer in s.get("schedule_layers") or []:
            label = f"schedule {name} layer {layer.get('name', '?')!r}"
            users = []
            for member in layer.get("users") or []:
                user = member.get("user") or {}
                uid = str(user.get("id", ""))
                if uid:
                    users.append(uid)
                    out.users.setdefault(uid, str(user.get("summary", "")))
            if not users:
                out.unmapped.append(f"{label}: no users")
                continue
            for r in layer.get("restrictions") or []:
                out.unmapped.append(
                    f"{label}: restriction {r.get('type')} from {r.get('start_time_of_day')} for "
                    f"{r.get('duration_seconds')} s (decklog layers have no restrictions: on call all day)"
                )
            if layer.get("end"):
                out.unmapped.append(f"{label}: ends {layer['end']} (decklog layers do not end)")
            layers.append(
                {
                    "users": users,
                    "rotation": format_duration(float(layer.get("rotation_turn_length_seconds") or DAY)),
                    "start": str(layer.get("rotation_virtual_start") or layer.get("start")),
                }
            )
        if not layers:
            out.unmapped.append(f"schedule {name}: no layer could be mapped, so the schedule is left out")
            continue
        out.schedules.append({"name": name, "timezone": str(s.get("time_zone") or "UTC"), "layers": layers})
    for p in policies:
        name = str(p.get("name") or p.get("id") or "policy")
        levels = []
        for rule in p.get("escalation_rules") or []:
            targets = []
            for t in rule.get("targets") or []:
                kind, tid = t.get("type", ""), str(t.get("id", ""))
                if kind in ("user_reference", "user"):
                    targets.append(f"user:{tid}")
                    out.users.setdefault(tid, str(t.get("summary", "")))
                elif kind in ("schedule_reference", "schedule") and tid in names:
                    targets.append(f"schedule:{names[tid]}")
                else:
                    out.unmapped.append(f"policy {name!r}: target {kind} {tid} ({t.get('summary', '')})")
            if not targets:
                out.unmapped.append(f"policy {name!r}: rule {rule.get('id', '?')} has no target decklog can page")
                continue
            after = float(rule.get("escalation_delay_in_minutes") or 0) * 60
            levels.append({"targets": targets, "after": format_duration(after)})
        if not levels:
            out.unmapped.append(f"policy {name!r}: no level could be mapped, so the policy is left out")
            continue
        loops = int(p.get("num_loops") or 0)
        out.policies.append({"name": name, "repeat": min(loops, 20), "levels": levels})
        if p.get("on_call_handoff_notifications"):
            out.unmapped.append(
                f"policy {name!r}: on_call_handoff_notifications={p['on_call_handoff_notifications']} (not configurable)"
            )
        for svc in p.get("services") or []:
            out.unmapped.append(
                f"policy {name!r}: used by service {svc.get('summary', svc.get('id'))!r} — add a [[oncall.routes]] "
                "with service = [...] if decklog's services have that name"
            )
    return out


# -- Opsgenie -------------------------------------------------------------------------------------------------------


def from_opsgenie(data: Any) -> Imported:
    data = _obj(data, "an Opsgenie export")
    if isinstance(data.get("data"), (dict, list)):  # a Get / List Schedule response
        inner = data["data"]
        schedules = inner if isinstance(inner, list) else [inner]
    elif "schedules" in data:
        schedules = _items(data, "schedule", "schedules")
    else:
        schedules = [data]
    out = Imported()
    for s in schedules:
        s = _obj(s, "an Opsgenie schedule")
        if "rotations" not in s:
            raise InvalidInput("an Opsgenie schedule needs its rotations (GET with expand=rotation)", field="rotations")
        name = slug(str(s.get("name") or s.get("id") or "schedule"))
        layers = []
        for rot in s.get("rotations") or []:
            label = f"schedule {name} rotation {rot.get('name', '?')!r}"
            unit = OPSGENIE_UNITS.get(str(rot.get("type", "")))
            if unit is None:
                out.unmapped.append(f"{label}: rotation type {rot.get('type')!r} is not hourly, daily or weekly")
                continue
            users = []
            for part in rot.get("participants") or []:
                kind = part.get("type")
                if kind == "user" and (part.get("username") or part.get("id")):
                    uid = str(part.get("username") or part.get("id"))
                    users.append(uid)
                    out.users.setdefault(uid, str(part.get("username", "")))
                elif kind == "none":
                    out.unmapped.append(f"{label}: a 'none' turn (nobody on call) is left out of the rotation")
                else:
                    who = part.get("name") or part.get("id") or "?"
                    out.unmapped.append(f"{label}: participant {kind} {who} (decklog rotates people only)")
            if not users:
                out.unmapped.append(f"{label}: no user participant, so the rotation is left out")
                continue
            if rot.get("endDate"):
                out.unmapped.append(f"{label}: ends {rot['endDate']} (decklog layers do not end)")
            if rot.get("timeRestriction"):
                out.unmapped.append(f"{label}: time restriction {rot['timeRestriction'].get('type')} (not supported)")
            length = int(rot.get("length") or 1)
            layers.append({"users": users, "rotation": format_duration(unit * length), "start": str(rot["startDate"])})
        if s.get("ownerTeam"):
            out.unmapped.append(f"schedule {name}: owner team {s['ownerTeam'].get('name', '?')} (decklog has no teams)")
        if not layers:
            out.unmapped.append(f"schedule {name}: no rotation could be mapped, so the schedule is left out")
            continue
        out.schedules.append({"name": name, "timezone": str(s.get("timezone") or "UTC"), "layers": layers})
    return out


# -- Grafana OnCall -------------------------------------------------------------------------------------------------


def from_grafana(data: Any) -> Imported:
    data = _obj(data, "a Grafana OnCall export")
    out = Imported()
    shifts = {str(x.get("id")): x for x in _items(data, "on_call_shift", "on_call_shifts")}
    names: dict[str, str] = {}
    for s in _items(data, "schedule", "schedules"):
        name = slug(str(s.get("name") or s.get("id")))
        names[str(s.get("id", ""))] = name
        if s.get("type") == "ical":
            out.unmapped.append(
                f"schedule {name}: an iCal schedule ({s.get('ical_url_primary')}): import the calendar by hand"
            )
            continue
        layers = []
        for sid in s.get("shifts") or []:
            shift = shifts.get(str(sid))
            if shift is None:
                out.unmapped.append(f"schedule {name}: shift {sid} is not in the export")
                continue
            label = f"schedule {name} shift {shift.get('name', sid)!r}"
            kind = shift.get("type")
            unit = GRAFANA_UNITS.get(str(shift.get("frequency", "")))
            if kind == "single_event" or unit is None:
                out.unmapped.append(f"{label}: a {kind} with no hourly/daily/weekly frequency (use an override)")
                continue
            rotation = unit * int(shift.get("interval") or 1)
            if kind == "rolling_users":
                groups = shift.get("rolling_users") or []
                users = [str(g[0]) for g in groups if g]
                if any(len(g) > 1 for g in groups):
                    out.unmapped.append(f"{label}: several people per turn (decklog pages the first of each)")
            else:
                users = [str(u) for u in shift.get("users") or []][:1]
                if len(shift.get("users") or []) > 1:
                    out.unmapped.append(f"{label}: several people per turn (decklog pages the first)")
            if shift.get("by_day") or (shift.get("duration") and int(shift["duration"]) < rotation):
                out.unmapped.append(
                    f"{label}: covers {shift.get('duration')} s of each {format_duration(rotation)}"
                    f"{' on ' + ','.join(shift['by_day']) if shift.get('by_day') else ''} "
                    "(a decklog layer covers the whole rotation)"
                )
            if not users:
                out.unmapped.append(f"{label}: no users")
                continue
            for u in users:
                out.users.setdefault(u, "")
            layers.append({"users": users, "rotation": format_duration(rotation), "start": str(shift.get("start"))})
        if not layers:
            out.unmapped.append(f"schedule {name}: no shift could be mapped, so the schedule is left out")
            continue
        out.schedules.append({"name": name, "timezone": str(s.get("time_zone") or "UTC"), "layers": layers})
    imported = {v for v in names.values() if any(s["name"] == v for s in out.schedules)}
    steps = _items(data, "escalation_policy", "escalation_policies")
    for chain in _items(data, "escalation_chain", "escalation_chains"):
        cname = str(chain.get("name") or chain.get("id"))
        mine = sorted(
            (x for x in steps if x.get("escalation_chain_id") == chain.get("id")), key=lambda x: x.get("position", 0)
        )
        levels: list[dict[str, Any]] = []
        waited = 0.0
        for step in mine:
            kind = step.get("type")
            if kind == "wait":
                if levels:
                    levels[-1]["after_s"] += float(step.get("duration") or 0)
                else:
                    waited += float(step.get("duration") or 0)
                continue
            targets: list[str] = []
            if kind in ("notify_persons", "notify_person_next_each_time"):
                people = step.get("persons_to_notify") or step.get("persons_to_notify_next_each_time") or []
                targets = [f"user:{p}" for p in people]
                for p in people:
                    out.users.setdefault(str(p), "")
                if kind == "notify_person_next_each_time":
                    out.unmapped.append(f"chain {cname!r}: 'next person each time' pages all of {people} instead")
            elif kind == "notify_on_call_from_schedule":
                sched = names.get(str(step.get("notify_on_call_from_schedule")))
                if sched in imported:
                    targets = [f"schedule:{sched}"]
            if not targets:
                out.unmapped.append(f"chain {cname!r}: step {step.get('id')} ({kind}) has nothing decklog can page")
                continue
            levels.append({"targets": targets, "after_s": 0.0})
        if waited:
            out.unmapped.append(
                f"chain {cname!r}: a {waited:g} s wait before the first notification (decklog pages at once)"
            )
        if not levels:
            out.unmapped.append(f"chain {cname!r}: no notify step could be mapped, so the policy is left out")
            continue
        out.policies.append(
            {
                "name": cname,
                "repeat": 0,
                "levels": [{"targets": lv["targets"], "after": format_duration(lv["after_s"])} for lv in levels],
            }
        )
    return out


IMPORTERS: dict[str, Callable[[Any], Imported]] = {
    "pagerduty": from_pagerduty,
    "opsgenie": from_opsgenie,
    "grafana-oncall": from_grafana,
}
