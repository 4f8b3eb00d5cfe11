"""The registry of entry kinds (kind → payload model) and the validation of a payload from outside input."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ValidationError

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
from decklog.core.entries.base import Payload
from decklog.core.entries.frame import (
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
from decklog.core.entries.lifecycle import ArchiveNotice, ChannelArchive, Reminder
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
from decklog.core.entries.oncall import Acknowledged, Escalated, Escalation, OncallHandoff, OncallOverride, Page
from decklog.core.errors import InvalidInput

PAYLOADS: dict[str, type[Payload]] = {
    "declared": Declared,
    "goal": Goal,
    "constraint": Constraint,
    "observation": Observation,
    "hypothesis": Hypothesis,
    "decision": Decision,
    "message": Message,
    "message_edited": MessageEdited,
    "message_deleted": MessageDeleted,
    "evidence": Evidence,
    "retracted": Retracted,  # a person takes back what a 📌, a pin or a ✅/❌ recorded (refs: that entry)
    "status_changed": StatusChanged,
    "severity_changed": SeverityChanged,
    "role_assigned": RoleAssigned,
    "thread_linked": ThreadLinked,
    "scope_linked": ScopeLinked,
    "obligation_opened": ObligationOpened,
    "obligation_claimed": ObligationClaimed,
    "obligation_released": ObligationReleased,
    "obligation_expired": ObligationExpired,
    "obligation_fulfilled": ObligationFulfilled,
    "obligation_cancelled": ObligationCancelled,
    "fence_rejected": FenceRejected,
    "proposal": ProposalMade,
    "approval": Approval,
    "approval_refused": ApprovalRefused,
    "proposal_closed": ProposalClosed,
    "action_started": ActionStarted,
    "action_result": ActionResult,
    "effect_compensated": EffectCompensated,
    "verification": Verification,
    "suggestion": Suggestion,
    "suggestion_feedback": SuggestionFeedback,
    "question": Question,
    "answer": Answer,
    "agent_turn": AgentTurn,
    "report_exported": ReportExported,
    "delivery_failed": DeliveryFailed,
    "finding_answer": FindingAnswer,  # a person confirms / rules out / takes / finishes an agent finding
    "follow_up": FollowUp,  # work kept for after the incident, filed in the team's tracker
    "follow_up_synced": FollowUpSynced,
    "follow_up_closed": FollowUpClosed,
    "archive_notice": ArchiveNotice,  # the channel lifecycle and reminders (core/lifecycle.py, core/reminders.py)
    "channel_archive": ChannelArchive,
    "reminder": Reminder,
    "forked": Forked,  # a copy of another scope for `decklog fork` / `replay`; it never routes live traffic
    "escalation": Escalation,  # on-call paging (core/oncall/)
    "page": Page,
    "acknowledged": Acknowledged,
    "escalated": Escalated,
    "oncall_override": OncallOverride,
    "oncall_handoff": OncallHandoff,
}


def parse_payload(kind: str, data: Any) -> Payload:
    """Validate ``data`` as the payload of ``kind``; errors name the kind and the field."""
    model = PAYLOADS.get(kind)
    if model is None:
        raise InvalidInput(f"unknown entry kind {kind!r} (known: {', '.join(sorted(PAYLOADS))})", field="kind")
    if isinstance(data, model):
        return data
    if not isinstance(data, dict):
        raise InvalidInput(f"the payload of a {kind} entry must be a JSON object", field="payload")
    try:
        payload = model.model_validate(data)
    except ValidationError as exc:
        raise invalid_input(exc, field="payload", where=f"a {kind} entry") from None
    if _non_finite(payload):  # the log is strict JSON: NaN and Infinity would break the hash chain's readers
        raise InvalidInput(f"NaN and Infinity are not JSON numbers (in a {kind} entry)", field="payload")
    return payload


def invalid_input(exc: ValidationError, *, field: str = "", where: str = "") -> InvalidInput:
    """A pydantic ``ValidationError`` as the ``InvalidInput`` every door shows as the caller's mistake (400, an
    ephemeral ``:warning:``, one line on stderr and exit 2): its first error, naming the field (under ``field``)
    and, for a text too long, the limit."""
    first = exc.errors()[0]
    loc = ".".join(str(part) for part in (field, *first["loc"]) if part != "") or "payload"
    ctx, given = first.get("ctx") or {}, first.get("input")
    if first["type"] == "string_too_long" and isinstance(given, str):
        message = f"at most {ctx.get('max_length')} characters (this one has {len(given)})"
    else:
        message = str(first["msg"])
    return InvalidInput(f"{message} (in {where})" if where else message, field=loc)


def _non_finite(value: Any) -> bool:
    """Whether a NaN or an infinity hides anywhere in ``value`` (a payload, its dicts, lists and models).

    A walk over the values themselves: the same answer as ``json.dumps(model_dump(), allow_nan=False)`` raising,
    without building the dump and the text (~50 µs for an alert observation)."""
    kind = type(value)
    if kind is float:
        return not math.isfinite(value)
    if kind is str or kind is int or kind is bool or value is None:
        return False
    if isinstance(value, dict):
        return any(_non_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_non_finite(v) for v in value)
    if isinstance(value, BaseModel):
        return any(_non_finite(v) for v in value.__dict__.values())
    return isinstance(value, float) and not math.isfinite(value)


def trusted_payload(kind: str, text: str | bytes) -> Payload:
    """The payload of a stored row from its JSON text: pydantic-core parses and types it (tuples, literals,
    dicts) in one pass. The checks ``parse_payload`` adds for outside input (a JSON object, no NaN/Infinity)
    held when the row was written; ``verify`` and imports still go through ``parse_payload``."""
    model = PAYLOADS.get(kind)
    if model is None:
        raise InvalidInput(f"unknown entry kind {kind!r} (known: {', '.join(sorted(PAYLOADS))})", field="kind")
    return model.model_validate_json(text)
