"""Entries: the immutable, typed records appended to a scope's log.

One frozen pydantic model per entry kind (``PAYLOADS``). An ``Entry`` is what the log holds (seq, id, time,
actor, payload, evidence refs, idempotency key, hash chain); a ``NewEntry`` is what a caller asks to append.
Unknown kinds and invalid payloads are rejected with an error that names the field.

A recorded assertion is a claim to check, not ground truth: ``Actor`` says who made it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.clock import iso
from core.errors import InvalidInput

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


# --- the incident's frame --------------------------------------------------------------------------------------


class Declared(Payload):
    title: str = Field(min_length=1, max_length=300)
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
    turn: int = 0  # issue 15: the seq of the agent_turn that produced it (0: a person's, or recorded before)


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


# --- obligations and claims -------------------------------------------------------------------------------------


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
    turn: int = 0  # issue 15: the seq of the agent_turn that opened it (0: not an agent turn's)


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


# --- follow-ups in the team's tracker (issue 18) ----------------------------------------------------------------


def _due(value: str) -> str:
    if value and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        raise ValueError("due must be a date YYYY-MM-DD")
    if value:
        try:
            date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"due {value!r} is not a calendar date") from None
    return value


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
    """The tracker says the follow-up's issue was closed (a GitHub ``issues`` webhook)."""

    follow_up: int = Field(ge=1)
    url: str = ""
    state: str = "closed"
    by: str = ""


class FenceRejected(Payload):
    """A write by a stale holder was refused and is recorded so that the timeline shows it."""

    obligation_id: str
    fence: int
    current_fence: int
    holder: str = ""
    attempted: str = ""
    reason: str = ""


# --- proposals, approvals, actions --------------------------------------------------------------------------------


class ProposalMade(Payload):
    proposal_id: str = Field(min_length=1)
    action: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)
    preview: str = ""
    args_hash: str = ""
    risk: Risk
    obligation_id: str = ""
    rationale: str = ""
    safety_conditions: tuple[str, ...] = ()
    expires_at: str = ""
    inputs_digest: str = ""
    status: Literal["waiting_for_approval", "approved", "denied"] = "waiting_for_approval"
    approvals_required: int = 1
    compensates_run: str = ""
    # on whose behalf (a proposal re-evaluated after drift keeps its original proposer); empty: the entry's actor
    proposer: str = ""
    # why the policy decided as it did (R4: why it is denied; re-evaluated: what drifted)
    reason: str = ""
    # the safety conditions as evaluated at proposal time: {name, ok, detail, inputs}
    checks: tuple[dict[str, Any], ...] = ()


class Approval(Payload):
    proposal_id: str
    decision: Literal["approved", "denied"]
    approver: str = Field(min_length=1)
    approver_name: str = ""
    reason: str = ""


class ApprovalRefused(Payload):
    """Someone tried to approve or deny and was not allowed to (recorded, and told why)."""

    proposal_id: str
    user_id: str
    reason: str


class ProposalClosed(Payload):
    """A parked proposal left the park without running: expired, voided by drift, or superseded."""

    proposal_id: str
    outcome: Literal["expired", "voided", "superseded", "withdrawn"]
    reason: str = ""


class ActionStarted(Payload):
    run_id: str = Field(min_length=1)
    action: str
    proposal_id: str = ""
    obligation_id: str = ""
    fence: int = 0
    lease_until: str = ""
    receipt: str = ""
    idempotency_key: str = ""
    proposer: str = ""
    approvers: tuple[str, ...] = ()
    params: dict[str, Any] = Field(default_factory=dict)
    compensates_run: str = ""


class ActionResult(Payload):
    run_id: str
    action: str = ""
    outcome: Literal["applied", "refused", "uncertain", "not_applied", "abandon_uncertain", "skipped", "failed"]
    fence: int = 0
    effect_digest: str = ""
    response: dict[str, Any] = Field(default_factory=dict)
    error: str = ""
    reconciled: bool = False


class EffectCompensated(Payload):
    original_run: str
    original_digest: str = ""
    compensating_run: str
    compensating_digest: str = ""


class Verification(Payload):
    obligation_id: str = ""
    run_id: str = ""
    outcome: Literal["verified", "failed", "inconclusive"]
    expected: str = ""
    observed: str = ""


# --- agents -------------------------------------------------------------------------------------------------------


class Suggestion(Payload):
    suggestion_id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    action: str = ""  # e.g. "resolve", or an action name
    rationale: str = ""
    turn: int = 0  # issue 15: the seq of the agent_turn that produced it


class SuggestionFeedback(Payload):
    suggestion_id: str
    verdict: Literal["accepted", "dismissed"]
    user_id: str = ""


class Question(Payload):
    """``ask``: a question stored before it is answered; the ``answer`` entry refers to it (``refs``).

    ``key``: the request's idempotency key (the answer is appended under ``ask:<key>``, so it happens once);
    ``channel`` / ``message_ts``: the message that carries the question, when it is already in the thread;
    otherwise ``refs`` points at the ``message`` entry that echoes it there."""

    text: str
    key: str
    channel: str = ""
    message_ts: str = ""


class Answer(Payload):
    question: str
    text: str
    question_ts: str = ""


class AgentTurn(Payload):
    reasoner: str
    model: str = ""
    view: str = ""
    view_bytes: int = 0
    view_tokens: int = 0
    seq_from: int = 0
    seq_to: int = 0
    trigger: str = ""
    tool_calls: tuple[dict[str, Any], ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cost_usd: float = 0.0
    duration_ms: int = 0
    outcome: str = "ok"  # ok | nothing (the turn decided nothing) | failed | refused
    error: str = ""
    appended: tuple[int, ...] = ()


# --- issue 15: answers to findings (kept apart from the kinds above to ease merges) ---------------------------

FINDING_VERDICTS = ("confirmed", "ruled_out", "accepted", "dismissed", "taken", "done")


class FindingAnswer(Payload):
    """A person's answer to an agent finding (``refs``: the finding's seq): Confirm / Rule out a hypothesis,
    Take it / Done an obligation. ``suspect_scope`` / ``obligation_id`` copy what the finding was about, so that
    readers (the rules, the report) need not fetch the finding again."""

    finding: int = Field(ge=1)
    finding_kind: str = Field(min_length=1)
    verdict: Literal["confirmed", "ruled_out", "accepted", "dismissed", "taken", "done"]
    suspect_scope: str = ""
    obligation_id: str = ""
    note: str = ""


# --- bookkeeping ------------------------------------------------------------------------------------------------


class ReportExported(Payload):
    format: Literal["md", "json", "html"]
    sha256: str
    bytes: int = 0
    file_id: str = ""
    destination: str = ""


class Forked(Payload):
    """The last entry a fork copies in (``decklog fork``): entries 1..``seq`` of ``source`` precede it. A scope
    holding one is a fork: the outbox delivers it to the index only (core/outbox.py), never to Slack or executors."""

    source: str = Field(min_length=1)
    seq: int = Field(ge=1)


class DeliveryFailed(Payload):
    sender: str
    seq: int
    attempts: int = 0
    error: str = ""


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
    "finding_answer": FindingAnswer,  # issue 15
    "follow_up": FollowUp,  # issue 18
    "follow_up_synced": FollowUpSynced,
    "follow_up_closed": FollowUpClosed,
    "forked": Forked,  # issue 17: decklog fork / replay
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
        first = exc.errors()[0]
        loc = ".".join(str(part) for part in first["loc"]) or "payload"
        raise InvalidInput(f"{first['msg']} (in a {kind} entry)", field=f"payload.{loc}") from None
    if _non_finite(payload):  # the log is strict JSON: NaN and Infinity would break the hash chain's readers
        raise InvalidInput(f"NaN and Infinity are not JSON numbers (in a {kind} entry)", field="payload")
    return payload


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


class NewEntry(BaseModel):
    """What a caller asks to append. The store assigns seq, id, time and hashes."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    kind: str
    actor: Actor
    payload: Payload
    refs: tuple[int, ...] = ()
    idempotency_key: str | None = None
    #: Only a fork's copies set it (core/fork.py): the original entry's time. The store never lets a scope's
    #: times go backwards (an earlier ``at`` is raised to the head's); unset = the store's clock.
    at: datetime | None = None

    @classmethod
    def make(
        cls,
        kind: str,
        actor: Actor,
        payload: Payload | dict[str, Any],
        *,
        refs: tuple[int, ...] | list[int] = (),
        idempotency_key: str | None = None,
    ) -> NewEntry:
        return cls(
            kind=kind,
            actor=actor,
            payload=parse_payload(kind, payload),
            refs=tuple(refs),
            idempotency_key=idempotency_key,
        )


class Entry(BaseModel):
    """One record of the log, as stored."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    scope: str
    seq: int
    id: str
    kind: str
    at: datetime
    actor: Actor
    payload: Payload
    refs: tuple[int, ...] = ()
    idempotency_key: str | None = None
    prev_hash: str = ""
    hash: str = ""

    @property
    def text(self) -> str:
        return render_text(self.kind, self.payload, self.actor)

    def to_json(self) -> dict[str, Any]:
        """The external JSON shape of ``decklog timeline --json`` and the REST API."""
        return {
            "scope": self.scope,
            "seq": self.seq,
            "id": self.id,
            "kind": self.kind,
            "at": iso(self.at),
            "actor": self.actor.model_dump(),
            "text": self.text,
            "payload": self.payload.model_dump(mode="json"),
            "refs": list(self.refs),
            "idempotency_key": self.idempotency_key,
            "hash": self.hash,
        }


_ENTRY_FIELDS = frozenset(Entry.model_fields)
_set = object.__setattr__


def trusted_entry(
    *,
    scope: str,
    seq: int,
    id: str,
    kind: str,
    at: datetime,
    actor: Actor,
    payload: Payload,
    refs: tuple[int, ...],
    idempotency_key: str | None,
    prev_hash: str,
    hash: str,
) -> Entry:
    """An ``Entry`` from parts that are already the right types (a validated ``NewEntry``'s, or a row this store
    wrote, parsed by ``trusted_payload``): what ``Entry.model_construct`` builds (every field set, no
    validation), without its per-field loop over defaults and aliases (~20 µs)."""
    entry = Entry.__new__(Entry)
    _set(
        entry,
        "__dict__",
        {
            "scope": scope,
            "seq": seq,
            "id": id,
            "kind": kind,
            "at": at,
            "actor": actor,
            "payload": payload,
            "refs": refs,
            "idempotency_key": idempotency_key,
            "prev_hash": prev_hash,
            "hash": hash,
        },
    )
    _set(entry, "__pydantic_fields_set__", set(_ENTRY_FIELDS))
    _set(entry, "__pydantic_extra__", None)
    _set(entry, "__pydantic_private__", None)
    return entry


def trusted_payload(kind: str, text: str | bytes) -> Payload:
    """The payload of a stored row from its JSON text: pydantic-core parses and types it (tuples, literals,
    dicts) in one pass. The checks ``parse_payload`` adds for outside input (a JSON object, no NaN/Infinity)
    held when the row was written; ``verify`` and imports still go through ``parse_payload``."""
    model = PAYLOADS.get(kind)
    if model is None:
        raise InvalidInput(f"unknown entry kind {kind!r} (known: {', '.join(sorted(PAYLOADS))})", field="kind")
    return model.model_validate_json(text)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def payload_json(payload: Payload) -> str:
    return canonical_json(payload.model_dump(mode="json"))


def actor_json(actor: Actor) -> str:
    """The stored text of an actor (three strings: the fields themselves, as ``model_dump()`` gives them)."""
    return canonical_json(actor.__dict__)


def chain_hash(
    *,
    prev_hash: str,
    seq: int,
    entry_id: str,
    kind: str,
    at: str,
    actor_json: str,
    payload: str,
    refs_json: str,
    idempotency_key: str | None,
) -> str:
    """sha256 over the previous hash and the entry's stored columns: altering, removing or reordering breaks it."""
    material = canonical_json([prev_hash, seq, entry_id, kind, at, actor_json, payload, refs_json, idempotency_key])
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def _clip(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def render_text(kind: str, p: Payload, actor: Actor) -> str:
    """One human-readable line for an entry: what the timeline and the report show."""
    who = actor.label()
    match p:
        case Declared():
            sev = f" (SEV{p.severity})" if p.severity else ""
            return f"{who} declared “{_clip(p.title)}”{sev}"
        case Goal():
            return f"Goal: {_clip(p.text)}"
        case Constraint():
            return f"Constraint: {_clip(p.text)}"
        case Observation():
            return f"Observed: {_clip(p.text)}"
        case Hypothesis():
            return f"Hypothesis ({who}): {_clip(p.text)}"
        case Decision():
            return f"Decision ({who}): {_clip(p.text)}"
        case Message():
            return f"{who}: {_clip(p.text)}"
        case MessageEdited():
            return f"{who} edited a message: {_clip(p.text)}"
        case MessageDeleted():
            return f"{who} deleted a message"
        case Evidence():
            return f"📌 {who} pinned: {_clip(p.text)}"
        case StatusChanged():
            extra = f" — {_clip(p.summary)}" if p.summary else ""
            return f"{who} set status to {p.status}{extra}"
        case SeverityChanged():
            why = f" ({_clip(p.reason)})" if p.reason and actor.type == "system" else ""  # an alert source's reason
            return f"{who} set severity to SEV{p.severity}{why}"
        case RoleAssigned():
            return f"{who} assigned {p.role} to {p.user_name or p.user_id}"
        case ThreadLinked():
            return f"Thread opened in {p.channel}"
        case ScopeLinked():
            return f"Linked {p.scope} ({p.relation}){': ' + _clip(p.reason) if p.reason else ''}"
        case ObligationOpened():
            return f"Obligation {p.obligation_id} opened: {_clip(p.text)}"
        case ObligationClaimed():
            return f"{p.holder} claimed {p.obligation_id} (fence {p.fence})"
        case ObligationReleased():
            return f"Obligation {p.obligation_id} released (fence {p.fence})"
        case ObligationExpired():
            return f"Lease on {p.obligation_id} expired (fence {p.fence})"
        case ObligationFulfilled():
            return f"Obligation {p.obligation_id} fulfilled{': ' + _clip(p.note) if p.note else ''}"
        case ObligationCancelled():
            return f"Obligation {p.obligation_id} cancelled{': ' + _clip(p.reason) if p.reason else ''}"
        case FenceRejected():
            return f"Rejected a stale write on {p.obligation_id} (fence {p.fence} < {p.current_fence})"
        case ProposalMade():
            return f"{who} proposed {p.action} [{p.risk}] {_clip(p.preview, 120)} — {p.status.replace('_', ' ')}"
        case Approval():
            return f"{p.approver_name or p.approver} {p.decision} {p.proposal_id}"
        case ApprovalRefused():
            return f"Refused {p.user_id} on {p.proposal_id}: {_clip(p.reason)}"
        case ProposalClosed():
            return f"Proposal {p.proposal_id} {p.outcome}{': ' + _clip(p.reason) if p.reason else ''}"
        case ActionStarted():
            return f"Run {p.run_id} started {p.action} under fence {p.fence}"
        case ActionResult():
            return f"Run {p.run_id} {p.outcome}{': ' + _clip(p.error) if p.error else ''}"
        case EffectCompensated():
            return f"Run {p.compensating_run} compensated run {p.original_run}"
        case Verification():
            return f"Verification {p.outcome}: {_clip(p.observed or p.expected)}"
        case Suggestion():
            return f"Suggestion ({who}): {_clip(p.text)}"
        case SuggestionFeedback():
            return f"Suggestion {p.suggestion_id} {p.verdict}"
        case Question():
            return f"Question ({who}): {_clip(p.text)}"
        case Answer():
            return f"Answer ({who}): {_clip(p.text)}"
        case AgentTurn():
            return f"Agent turn ({p.reasoner}, {p.view}): {p.outcome}"
        case ReportExported():
            return f"Report exported ({p.format}, sha256 {p.sha256[:12]})"
        case FindingAnswer():
            what = f" ({p.suspect_scope or p.obligation_id})" if p.suspect_scope or p.obligation_id else ""
            return f"{who} {p.verdict.replace('_', ' ')} {p.finding_kind} #{p.finding}{what}"
        case FollowUp():
            extra = (f" → {p.owner}" if p.owner else "") + (f" (due {p.due})" if p.due else "")
            return f"Follow-up ({who}): {_clip(p.text)}{extra}"
        case FollowUpSynced():
            return p.text
        case FollowUpClosed():
            return f"Follow-up #{p.follow_up} closed in the tracker{': ' + p.url if p.url else ''}"
        case Forked():
            return f"forked from {p.source} at seq {p.seq}"
        case DeliveryFailed():
            return f"Delivery of #{p.seq} to {p.sender} failed after {p.attempts} attempts: {_clip(p.error)}"
    return str(getattr(p, "text", "") or kind)  # kinds registered by other modules (core.lifecycle_kinds) carry text


import core.lifecycle_kinds  # noqa: E402, F401  # issue 18: registers archive_notice, channel_archive, reminder
