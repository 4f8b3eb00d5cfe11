"""The on-call configuration (``[oncall]``, ``[[oncall.schedules]]``, ``[[oncall.policies]]``, ``[[oncall.routes]]``,
``[oncall.people.<slack id>]`` in decklog.toml), validated as a whole: a bad schedule (an unknown timezone, a zero
rotation, an empty user list), a level naming a schedule that does not exist or a route naming an unknown policy
stops start-up with the key's path (bot/config.py turns the first error into ``oncall.schedules.0.timezone: …``).

Durations are written ``"30s"``, ``"2m"``, ``"12h"``, ``"1d"``, ``"1w"`` (combined: ``"1h30m"``) or as a number of
seconds. A rotation is a fixed length: a daily layer across a daylight-saving change hands off at the same UTC
moment, so its local hour moves by one.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
TARGET_KINDS = ("schedule", "user", "pagerduty")
METHODS = ("slack", "sms", "voice", "email")


def parse_duration(value: Any) -> float:
    """Seconds from ``"12h"``, ``"1w"``, ``"1h30m"``, ``"90s"`` or a number; ``ValueError`` names what is wrong."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    parts = _PART.findall(text)
    if not parts or _PART.sub("", text).strip():
        raise ValueError(f'{value!r} is not a duration (e.g. "30s", "2m", "12h", "1d", "1w")')
    return sum(float(n) * UNITS[unit] for n, unit in parts)


def format_duration(seconds: float) -> str:
    """The shortest exact spelling of ``seconds`` (``604800`` → ``"1w"``, ``5400`` → ``"90m"``)."""
    for unit in ("w", "d", "h", "m"):
        if seconds >= UNITS[unit] and seconds % UNITS[unit] == 0:
            return f"{int(seconds // UNITS[unit])}{unit}"
    return f"{seconds:g}s"


def parse_when(text: str, tz: ZoneInfo) -> datetime:
    """An ISO 8601 time; without an offset it is read in the schedule's timezone."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=tz)
    return value.astimezone(UTC)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Layer(_Section):
    users: tuple[str, ...] = Field(min_length=1)
    rotation: float = Field(gt=0)  # seconds ("12h" in the file)
    start: str

    @field_validator("rotation", mode="before")
    @classmethod
    def _rotation(cls, value: Any) -> float:
        seconds = parse_duration(value)
        if seconds <= 0:
            raise ValueError("a rotation must be longer than 0 seconds")
        return seconds

    @field_validator("users")
    @classmethod
    def _users(cls, users: tuple[str, ...]) -> tuple[str, ...]:
        cleaned = tuple(u.strip().lstrip("@") for u in users)
        if any(not u for u in cleaned):
            raise ValueError("a user id is empty")
        return cleaned

    @field_validator("start")
    @classmethod
    def _start(cls, value: str) -> str:
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO 8601 time (e.g. 2026-12-07T09:00:00)") from None
        return value


class Schedule(_Section):
    name: str = Field(min_length=1, max_length=80, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    timezone: str = "UTC"
    layers: tuple[Layer, ...] = Field(min_length=1)

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown timezone {value!r} (an IANA name such as Europe/Berlin)") from None
        return value

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


class Level(_Section):
    targets: tuple[str, ...] = Field(min_length=1)
    after: float = Field(ge=0)

    @field_validator("after", mode="before")
    @classmethod
    def _after(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("targets")
    @classmethod
    def _targets(cls, targets: tuple[str, ...]) -> tuple[str, ...]:
        for t in targets:
            kind, _, name = t.partition(":")
            if kind not in TARGET_KINDS or not name:
                raise ValueError(f"{t!r}: a target is schedule:<name>, user:<slack id> or pagerduty:<routing key>")
        return targets


class Policy(_Section):
    name: str = Field(min_length=1, max_length=80)
    repeat: int = Field(0, ge=0, le=20)
    levels: tuple[Level, ...] = Field(min_length=1)


class Route(_Section):
    policy: str = Field(min_length=1)
    severity: tuple[int, ...] = ()  # SEV numbers this route takes (empty: any)
    service: tuple[str, ...] = ()  # services (the incident's or the catalog owner's) this route takes (empty: any)
    default: bool = False

    @field_validator("severity", mode="before")
    @classmethod
    def _severity(cls, value: Any) -> tuple[int, ...]:
        items = value if isinstance(value, (list, tuple)) else [value]
        out = []
        for v in items:
            text = str(v).strip().upper().removeprefix("SEV")
            if text not in ("1", "2", "3", "4"):
                raise ValueError(f"{v!r} is not a severity (1-4 or SEV1-SEV4)")
            out.append(int(text))
        return tuple(out)

    @field_validator("service", mode="before")
    @classmethod
    def _service(cls, value: Any) -> tuple[str, ...]:
        return tuple(value) if isinstance(value, (list, tuple)) else (str(value),)


class Rule(_Section):
    """Notify by ``method`` once ``after`` has passed since the level paged this person without an ack."""

    method: Literal["slack", "sms", "voice", "email"]
    after: float = Field(0, ge=0)

    @field_validator("after", mode="before")
    @classmethod
    def _after(cls, value: Any) -> float:
        return parse_duration(value)


class Person(_Section):
    phone: str = Field("", pattern=r"^(\+[1-9]\d{6,14})?$")  # E.164
    email: str = Field("", max_length=320)
    rules: tuple[Rule, ...] = (Rule(method="slack"),)

    @model_validator(mode="after")
    def _reachable(self) -> Person:
        for rule in self.rules:
            if rule.method in ("sms", "voice") and not self.phone:
                raise ValueError(f"a {rule.method} rule needs phone (E.164, e.g. +14155550100)")
            if rule.method == "email" and "@" not in self.email:
                raise ValueError("an email rule needs email")
        return self


class OncallConfig(_Section):
    schedules: tuple[Schedule, ...] = ()
    policies: tuple[Policy, ...] = ()
    routes: tuple[Route, ...] = ()
    people: dict[str, Person] = Field(default_factory=dict)
    approval_after: float = Field(0, ge=0)  # parked approvals page the on-call approver after this long (0: never)
    approver_policy: str = ""  # the policy that pages for parked approvals (default: the default route's)
    tick: float = Field(5.0, gt=0)  # how often due pages are looked for (seconds)
    auto_page_within: float = Field(3600.0, gt=0)  # incidents declared longer ago than this are not auto-paged

    @field_validator("approval_after", "tick", "auto_page_within", mode="before")
    @classmethod
    def _durations(cls, value: Any) -> float:
        return parse_duration(value)

    @model_validator(mode="after")
    def _references(self) -> OncallConfig:
        names = [s.name for s in self.schedules]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(f"schedules.{i}.name: {name!r} is defined twice")
        policies = [p.name for p in self.policies]
        for i, name in enumerate(policies):
            if name in policies[:i]:
                raise ValueError(f"policies.{i}.name: {name!r} is defined twice")
        for i, policy in enumerate(self.policies):
            for j, level in enumerate(policy.levels):
                for t in level.targets:
                    kind, _, name = t.partition(":")
                    if kind == "schedule" and name not in names:
                        raise ValueError(f"policies.{i}.levels.{j}.targets: no schedule named {name!r}")
        for i, route in enumerate(self.routes):
            if route.policy not in policies:
                raise ValueError(f"routes.{i}.policy: no policy named {route.policy!r}")
        if self.approver_policy and self.approver_policy not in policies:
            raise ValueError(f"approver_policy: no policy named {self.approver_policy!r}")
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.schedules or self.policies)

    def schedule(self, name: str) -> Schedule | None:
        return next((s for s in self.schedules if s.name == name), None)

    def policy(self, name: str) -> Policy | None:
        return next((p for p in self.policies if p.name == name), None)

    def person(self, user: str) -> Person:
        return self.people.get(user) or Person()

    def route_for(self, severity: int | None, services: tuple[str, ...]) -> Policy | None:
        """The first route whose severity and service match (empty = any), else the default route's policy."""
        for route in self.routes:
            if route.default:
                continue
            if route.severity and severity not in route.severity:
                continue
            if route.service and not set(route.service) & set(services):
                continue
            return self.policy(route.policy)
        default = next((r for r in self.routes if r.default), None)
        return self.policy(default.policy) if default else None

    def approver(self) -> Policy | None:
        if self.approver_policy:
            return self.policy(self.approver_policy)
        default = next((r for r in self.routes if r.default), None)
        return self.policy(default.policy) if default else (self.policies[0] if self.policies else None)
