"""Entry kinds of on-call paging (core/oncall/).

- ``escalation``: paging started in an incident: the levels copied from the policy (or one level naming a person,
  for ``/incident page @user``) so that a later change of decklog.toml never changes a page already under way;
  ``repeat``: how many more times the levels run after the last one; ``reason``: a route, a person's command, or a
  parked approval (``proposal``: its id; the DM then carries Approve / Deny).
- ``page``: one notification that fell due: (escalation, level, target person, repetition, contact method) — its
  ``key`` is the idempotency key it was appended under, and the outbox topic ``oncall`` delivers it.
- ``acknowledged``: a person acknowledged: every escalation started before it stops; its pages not yet delivered
  are not sent. ``via``: button, command, mention or sms.
- ``escalated``: a person asked for the next level now (the DM's Escalate button).
- ``oncall_override``: in an ``oncall/<schedule>`` scope: ``user`` is on call from ``start`` to ``end``.
- ``oncall_handoff``: in an ``oncall/<schedule>`` scope: the person on call changed at ``at`` (posted to the alerts
  channel by the ``oncall`` sender).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from decklog.core.entries.base import Payload

#: One level: its targets (``schedule:<name>`` | ``user:<slack id>`` | ``pagerduty:<routing key>``) and how long to
#: wait for an acknowledgement before the next level, in seconds. Plain tuples, not a nested model: stored payloads
#: are read back on the trusted path (core/store), which handles plain JSON types only.
EscalationLevel = tuple[tuple[str, ...], float]


class Escalation(Payload):
    policy: str = ""  # "" for a page by hand to one person
    levels: tuple[EscalationLevel, ...] = Field(min_length=1)
    repeat: int = Field(0, ge=0, le=20)
    reason: Literal["route", "command", "approval"] = "route"
    by: str = ""  # who paged by hand
    proposal: str = ""  # reason approval: the parked proposal's id
    text: str = ""


class Page(Payload):
    escalation: int = Field(ge=1)  # the escalation entry's seq
    level: int = Field(ge=0)
    target: str = Field(min_length=1)  # a Slack user id, or the PagerDuty routing key for method pagerduty
    repetition: int = Field(0, ge=0)
    method: Literal["slack", "sms", "voice", "email", "pagerduty"]
    key: str = Field(min_length=1)
    due_at: str = Field(min_length=1)
    source: str = ""  # schedule:<name> / user:<id> / pagerduty:<key>: where the target came from
    proposal: str = ""


class Acknowledged(Payload):
    user: str = Field(min_length=1)
    via: Literal["button", "command", "mention", "sms", "api"] = "command"
    escalations: tuple[int, ...] = ()  # the escalations it stopped (those still running when it came)


class Escalated(Payload):
    escalation: int = Field(ge=1)
    to_level: int = Field(ge=1)
    user: str = Field(min_length=1)


class OncallHandoff(Payload):
    """In an ``oncall/<schedule>`` scope: ``user`` is on call from ``at`` (``previous`` was before), until ``until``."""

    schedule: str = Field(min_length=1)
    user: str = ""  # "" = nobody
    previous: str = ""
    at: str = Field(min_length=1)
    until: str = ""


class OncallOverride(Payload):
    schedule: str = Field(min_length=1)
    user: str = Field(min_length=1)
    start: str = Field(min_length=1)
    end: str = Field(min_length=1)
    by: str = ""
