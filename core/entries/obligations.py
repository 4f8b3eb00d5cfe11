"""Payloads of obligations (opened, claimed under a fence, released, fulfilled) and follow-ups."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from decklog.core.entries.base import Payload, _due


class ObligationOpened(Payload):
    obligation_id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    purpose: str = "task"  # task | rollback | verification | follow_up | compensation
    conditions: tuple[str, ...] = ()
    action: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    expected_outcome: str = ""
    due_at: str = ""
    run_id: str = ""  # for verification obligations: the run to verify
    turn: int = 0  # provenance: the seq of the agent_turn that opened it (0: not an agent turn's)


class ObligationClaimed(Payload):
    obligation_id: str
    holder: str = Field(min_length=1)
    fence: int = Field(ge=1)
    lease_until: str
    claim_id: str = ""


class ObligationReleased(Payload):
    obligation_id: str
    fence: int
    reason: str = ""


class ObligationExpired(Payload):
    obligation_id: str
    fence: int = 0
    reason: str = "lease expired"


class ObligationFulfilled(Payload):
    obligation_id: str
    fence: int = 0
    note: str = ""
    run_id: str = ""


class ObligationCancelled(Payload):
    obligation_id: str
    reason: str = ""


# --- follow-ups in the team's tracker ---------------------------------------------------------------------------


class FollowUp(Payload):
    """``@decklog follow-up <text> [@owner] [due YYYY-MM-DD]``: work for after the incident, synced to a tracker."""

    text: str = Field(min_length=1, max_length=500)
    owner: str = Field(default="", max_length=200)
    due: str = ""
    obligation_id: str = ""  # when it was made from an open obligation (the report's button)

    _check_due = field_validator("due")(_due)


class FollowUpSynced(Payload):
    """The tracker issue of a follow-up (``refs``: the follow_up's seq); ``text`` contains the issue's URL."""

    follow_up: int = Field(ge=1)
    tracker: Literal["github", "jira"]
    url: str = Field(min_length=1, max_length=2000)
    number: str = Field(min_length=1, max_length=100)  # GitHub's issue number, Jira's key
    text: str = Field(min_length=1)


class FollowUpClosed(Payload):
    """The tracker says the follow-up's issue was closed (a GitHub ``issues`` webhook, ``refs``: the follow_up's
    seq); ``state`` ``open`` when it was reopened. ``reason``: GitHub's ``state_reason`` (``completed``,
    ``not_planned``), when it sent one; ``by``: who closed it there; ``changed_at``: the issue's ``updated_at``
    (ISO 8601, UTC) as the tracker stamped the change, which orders changes that arrive out of order."""

    follow_up: int = Field(ge=1)
    url: str = ""
    state: Literal["closed", "open"] = "closed"
    by: str = ""
    reason: str = Field(default="", max_length=50)
    changed_at: str = Field(default="", max_length=40)


class FenceRejected(Payload):
    """A write by a stale holder was refused and is recorded so that the timeline shows it."""

    obligation_id: str
    fence: int
    current_fence: int
    holder: str = ""
    attempted: str = ""
    reason: str = ""
