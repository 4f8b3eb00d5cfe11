"""Entries: the immutable, typed records appended to a scope's log.

One frozen pydantic model per entry kind (``PAYLOADS``). An ``Entry`` is what the log holds (seq, id, time,
actor, payload, evidence refs, idempotency key, hash chain); a ``NewEntry`` is what a caller asks to append.
Unknown kinds and invalid payloads are rejected with an error that names the field.

A recorded assertion is a claim to check, not ground truth: ``Actor`` says who made it.

The package: ``base`` (``Actor``, ``Payload``), one module of payload models per family (``frame``,
``obligations``, ``actions``, ``agents``), ``registry`` (``PAYLOADS``: kind → model, ``parse_payload``),
``render`` (``render_text``), ``records`` (``Entry``, ``NewEntry``, the canonical JSON and the hash chain).
Everything is importable from ``core.entries``.
"""

from __future__ import annotations

from decklog.core.entries.actions import (
    ActionResult,
    ActionStarted,
    Approval,
    ApprovalRefused,
    EffectCompensated,
    ProposalClosed,
    ProposalMade,
    Verification,
)
from decklog.core.entries.agents import (
    AgentTurn,
    Answer,
    DeliveryFailed,
    FindingAnswer,
    Forked,
    Question,
    ReportExported,
    Suggestion,
    SuggestionFeedback,
)
from decklog.core.entries.base import CHANGE_STATUSES, INCIDENT_STATUSES, Actor, ActorType, Payload, Risk
from decklog.core.entries.frame import (
    TITLE_MAX,
    Constraint,
    Decision,
    Declared,
    Evidence,
    Goal,
    Hypothesis,
    Message,
    MessageDeleted,
    MessageEdited,
    Observation,
    Retracted,
    RoleAssigned,
    ScopeLinked,
    SeverityChanged,
    StatusChanged,
    ThreadLinked,
)
from decklog.core.entries.obligations import (
    FenceRejected,
    FollowUp,
    FollowUpClosed,
    FollowUpSynced,
    ObligationCancelled,
    ObligationClaimed,
    ObligationExpired,
    ObligationFulfilled,
    ObligationOpened,
    ObligationReleased,
)
from decklog.core.entries.records import (
    Entry,
    NewEntry,
    actor_json,
    canonical_json,
    chain_hash,
    payload_json,
    trusted_entry,
)
from decklog.core.entries.registry import PAYLOADS, parse_payload, trusted_payload
from decklog.core.entries.render import render_text

__all__ = [
    "CHANGE_STATUSES",
    "INCIDENT_STATUSES",
    "PAYLOADS",
    "TITLE_MAX",
    "ActionResult",
    "ActionStarted",
    "Actor",
    "ActorType",
    "AgentTurn",
    "Answer",
    "Approval",
    "ApprovalRefused",
    "Constraint",
    "Decision",
    "Declared",
    "DeliveryFailed",
    "EffectCompensated",
    "Entry",
    "Evidence",
    "FenceRejected",
    "FindingAnswer",
    "FollowUp",
    "FollowUpClosed",
    "FollowUpSynced",
    "Forked",
    "Goal",
    "Hypothesis",
    "Message",
    "MessageDeleted",
    "MessageEdited",
    "NewEntry",
    "ObligationCancelled",
    "ObligationClaimed",
    "ObligationExpired",
    "ObligationFulfilled",
    "ObligationOpened",
    "ObligationReleased",
    "Observation",
    "Payload",
    "ProposalClosed",
    "ProposalMade",
    "Question",
    "ReportExported",
    "Retracted",
    "Risk",
    "RoleAssigned",
    "ScopeLinked",
    "SeverityChanged",
    "StatusChanged",
    "Suggestion",
    "SuggestionFeedback",
    "ThreadLinked",
    "Verification",
    "actor_json",
    "canonical_json",
    "chain_hash",
    "parse_payload",
    "payload_json",
    "render_text",
    "trusted_entry",
    "trusted_payload",
]
