"""Payloads of agents (suggestions, questions, turns, answers to findings) and bookkeeping (exports, forks,
failed deliveries)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from decklog.core.entries.base import Payload


class Suggestion(Payload):
    suggestion_id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    action: str = ""  # e.g. "resolve", or an action name
    rationale: str = ""
    turn: int = 0  # provenance: the seq of the agent_turn that produced it (0: a person's)


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


# --- answers to findings: a person's verdict on one agent finding --------------------------------------------

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
    holding one is a fork: the outbox delivers it to the index only (core/outbox/dispatcher.py), never to Slack or executors."""

    source: str = Field(min_length=1)
    seq: int = Field(ge=1)


class DeliveryFailed(Payload):
    sender: str
    seq: int
    attempts: int = 0
    error: str = ""
