"""Payloads of the incident's frame: its declaration, what was seen, said, pinned and decided, its links."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from decklog.core.entries.base import Payload, _severity

#: The longest title a scope may have (an alert's longer title is cut to it, core/alerts/rules.py).
TITLE_MAX = 300


class Declared(Payload):
    title: str = Field(min_length=1, max_length=TITLE_MAX)
    severity: int | None = None
    services: tuple[str, ...] = ()
    summary: str = ""
    via: str = "api"  # slack | cli | alert | api | demo | change
    dedicated_channel: bool = False
    channel: str = ""  # the chat channel the declaration came from (where its header goes by default)

    _check_severity = field_validator("severity")(_severity)


class Goal(Payload):
    text: str = Field(min_length=1)


class Constraint(Payload):
    text: str = Field(min_length=1)


class Observation(Payload):
    """Something seen: an alert firing or resolving, a metric, a log line, a change on a linked service."""

    text: str = Field(min_length=1)
    source: str = ""  # alertmanager | grafana | pagerduty | datadog | generic | human | agent | change
    service: str = ""
    fingerprint: str = ""
    alert_status: Literal["", "firing", "acknowledged", "resolved"] = ""
    labels: dict[str, str] = Field(default_factory=dict)
    links: tuple[str, ...] = ()
    data: dict[str, Any] = Field(default_factory=dict)
    raw: dict[str, Any] = Field(default_factory=dict)


class Hypothesis(Payload):
    text: str = Field(min_length=1)
    confidence: float | None = Field(default=None, ge=0, le=1)
    suspect_scope: str = ""  # e.g. change/r2026-09-19-4
    subject: str = ""  # what it names: a service ("payments") or a change scope ("change/r2026-09-19-4")
    rank: int = Field(default=0, ge=0)  # 1 = the turn's most likely cause; 0 = unranked (a person's)
    turn: int = 0  # provenance: the seq of the agent_turn that produced it (0: a person's, or recorded before)


class Decision(Payload):
    text: str = Field(min_length=1)
    rationale: str = ""
    expected_outcome: str = ""


class Message(Payload):
    """A human (or bot) message in the scope's thread or channel."""

    text: str
    channel: str = ""
    ts: str = ""
    thread_ts: str = ""
    permalink: str = ""


class MessageEdited(Payload):
    text: str
    channel: str = ""
    ts: str = ""
    previous_text: str = ""


class MessageDeleted(Payload):
    channel: str = ""
    ts: str = ""
    previous_text: str = ""


class Evidence(Payload):
    """A message pinned to the timeline (📌) or an artefact attached as evidence."""

    text: str
    channel: str = ""
    ts: str = ""
    author: str = ""
    permalink: str = ""
    source: str = "pin"


class Retracted(Payload):
    """A person takes back what a reaction or pin recorded (the 📌 or pin removed, the ✅/❌ removed); ``refs``
    holds the seq of the entry taken back, which stays in the log. ``what`` is that entry's kind; the rest copies
    what the fold needs to undo it (the evidence's message, the suggestion the feedback had answered)."""

    what: Literal["evidence", "suggestion_feedback"]
    text: str = ""
    channel: str = ""
    ts: str = ""
    suggestion_id: str = ""
    action: str = ""
    reason: str = ""


class StatusChanged(Payload):
    status: str
    previous: str = ""
    summary: str = ""


class SeverityChanged(Payload):
    severity: int
    previous: int | None = None
    reason: str = ""

    _check_severity = field_validator("severity", "previous")(_severity)


class RoleAssigned(Payload):
    role: str = Field(min_length=1, max_length=50)
    user_id: str = Field(min_length=1)
    user_name: str = ""


class ThreadLinked(Payload):
    """Where the scope lives in Slack (routing metadata; the header message's channel and ts)."""

    provider: str = "slack"
    channel: str = Field(min_length=1)
    ts: str = ""  # empty when the scope is a whole (dedicated) channel
    permalink: str = ""
    dedicated_channel: bool = False


class ScopeLinked(Payload):
    scope: str = Field(min_length=1)
    relation: str = "related"  # suspected_cause | caused | related | change | compensates
    reason: str = ""
