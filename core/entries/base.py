"""Who records an entry (``Actor``), the base of every payload, and the shared vocabularies."""

from __future__ import annotations

import re
from datetime import date
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ActorType = Literal["human", "agent", "system"]
Risk = Literal["R1", "R2", "R3", "R4"]

INCIDENT_STATUSES = ("investigating", "identified", "mitigated", "monitoring", "resolved")
CHANGE_STATUSES = ("started", "succeeded", "failed", "pushed", "rolled_back")


class Actor(BaseModel):
    """Who recorded an entry: a human (Slack user id), an agent (reasoner name) or the system (a component)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: ActorType
    id: str = Field(min_length=1, max_length=200)
    name: str = Field(default="", max_length=200)

    @classmethod
    def system(cls, component: str = "decklog") -> Actor:
        return cls(type="system", id=component, name=component)

    @classmethod
    def human(cls, user_id: str, name: str = "") -> Actor:
        return cls(type="human", id=user_id, name=name or user_id)

    @classmethod
    def agent(cls, agent_id: str, name: str = "") -> Actor:
        return cls(type="agent", id=agent_id, name=name or agent_id)

    def label(self) -> str:
        return self.name or self.id


class Payload(BaseModel):
    """Base of every payload model: frozen, no unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def _severity(value: int | None) -> int | None:
    if value is not None and not 1 <= value <= 4:
        raise ValueError("severity must be 1, 2, 3 or 4")
    return value


def _due(value: str) -> str:
    if value and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        raise ValueError("due must be a date YYYY-MM-DD")
    if value:
        try:
            date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"due {value!r} is not a calendar date") from None
    return value
