"""The REST API's shapes as pydantic models: what each write accepts (they validate the request bodies) and what
each route answers. adapters/http/openapi.py builds the OpenAPI description from these same classes, so the
description and the validation cannot disagree. Request models forbid unknown fields; answer models allow extra
fields (a client must ignore what it does not know).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from decklog.core.entries import CHANGE_STATUSES, INCIDENT_STATUSES, TITLE_MAX

TEXT_MAX = 4000
Text = Annotated[str, Field(min_length=1, max_length=TEXT_MAX, pattern=r"\S")]
Short = Annotated[str, Field(max_length=200)]
IncidentStatus = Literal["investigating", "identified", "mitigated", "monitoring", "resolved"]
assert set(IncidentStatus.__args__) == set(INCIDENT_STATUSES)  # type: ignore[attr-defined]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


# -- requests -------------------------------------------------------------------------------------------------------


class DeclareIn(_In):
    """Open an incident. Its id comes from the title (``incident/payments-5xx``), suffixed when taken."""

    title: str = Field(min_length=1, max_length=TITLE_MAX, pattern=r"\S")
    severity: int | None = Field(default=None, ge=1, le=4)
    services: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(default_factory=list, max_length=20)
    summary: str = Field(default="", max_length=TEXT_MAX)


class MessageIn(_In):
    kind: Literal["message"]
    text: Text
    refs: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list, max_length=50)


class GoalIn(_In):
    kind: Literal["goal"]
    text: Text
    refs: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list, max_length=50)


class ConstraintIn(_In):
    kind: Literal["constraint"]
    text: Text
    refs: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list, max_length=50)


class DecisionIn(_In):
    kind: Literal["decision"]
    text: Text
    rationale: str = Field(default="", max_length=TEXT_MAX)
    refs: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list, max_length=50)


class HypothesisIn(_In):
    kind: Literal["hypothesis"]
    text: Text
    confidence: float | None = Field(default=None, ge=0, le=1)
    refs: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list, max_length=50)


class EvidenceIn(_In):
    kind: Literal["evidence"]
    text: Text
    refs: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list, max_length=50)


class ObligationIn(_In):
    """Unfinished work; the answer's entry carries its ``obligation_id``."""

    kind: Literal["obligation"]
    text: Text
    refs: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list, max_length=50)


class FollowUpIn(_In):
    kind: Literal["follow_up"]
    text: str = Field(min_length=1, max_length=500, pattern=r"\S")
    owner: Short = ""
    due: str = Field(default="", pattern=r"^$|^[0-9]{4}-[0-9]{2}-[0-9]{2}$", description="YYYY-MM-DD")
    refs: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list, max_length=50)


EntryIn = Annotated[
    MessageIn | GoalIn | ConstraintIn | DecisionIn | HypothesisIn | EvidenceIn | ObligationIn | FollowUpIn,
    Field(discriminator="kind"),
]


class EntryRequest(RootModel[EntryIn]):
    """The body of ``POST …/entries``: one typed entry, chosen by ``kind``."""


class SeverityIn(_In):
    severity: int = Field(ge=1, le=4)
    reason: str = Field(default="", max_length=TEXT_MAX)


class StatusIn(_In):
    status: IncidentStatus
    summary: str = Field(default="", max_length=TEXT_MAX)


class RoleIn(_In):
    role: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,29}$", examples=["commander"])
    user_id: str = Field(min_length=1, max_length=200, pattern=r"\S")
    user_name: Short = ""


class ResolveIn(_In):
    summary: str = Field(default="", max_length=TEXT_MAX)


Param = str | int | float | bool


class ProposeIn(_In):
    """Propose a catalog action: R1 is approved at once, R2/R3 park for approval, R4 is refused."""

    action: str = Field(min_length=1, max_length=100)
    params: dict[Annotated[str, Field(min_length=1, max_length=100)], Param] = Field(default_factory=dict)
    rationale: str = Field(default="", max_length=TEXT_MAX)
    obligation_id: str = Field(default="", max_length=100)


class DecideIn(_In):
    reason: str = Field(default="", max_length=TEXT_MAX)


# -- answers --------------------------------------------------------------------------------------------------------


class ErrorOut(BaseModel):
    error: str


class ActorOut(_Out):
    type: Literal["human", "agent", "system"]
    id: str
    name: str


class EntryOut(_Out):
    """One entry, as ``decklog timeline --json`` prints it."""

    scope: str
    seq: int
    id: str
    kind: str
    at: str
    actor: ActorOut
    text: str
    payload: dict[str, Any]
    refs: list[int]


class ThreadOut(_Out):
    channel: str
    ts: str
    permalink: str


class ScopeRowOut(_Out):
    id: str
    kind: Literal["incident", "change"]
    title: str
    status: str
    severity: int | None
    services: list[str]
    created_at: str
    updated_at: str
    resolved_at: str | None
    version: int
    thread: ThreadOut | None
    pending_approvals: int


class ScopeListOut(_Out):
    scopes: list[ScopeRowOut]
    count: int
    more: bool = Field(description="true when the list was cut at `limit`: follow `next` for the rest")
    next: str | None = Field(description="the cursor of the next page (None: this is the last)")
    next_url: str | None


class ScopeOut(ScopeRowOut):
    acknowledged_at: str | None
    mitigated_at: str | None
    roles: dict[str, dict[str, str]]
    linked: list[str]
    obligations: list[dict[str, Any]]
    proposals: list[dict[str, Any]]
    alerts: dict[str, int]
    links: dict[str, Any]


class TimelineOut(_Out):
    scope: str
    entries: list[EntryOut]
    next: int | None
    next_url: str | None


class Distribution(_Out):
    p50: float | None
    p90: float | None
    mean: float | None


class InsightsOut(_Out):
    incidents: int
    open: int
    resolved: int
    mtta_seconds: Distribution | None
    mttm_seconds: Distribution | None
    mttr_seconds: Distribution | None
    by_severity: dict[str, Any]
    by_service: dict[str, Any]


class SearchHitOut(_Out):
    scope: str
    title: str
    seq: int
    kind: str
    snippet: str


class SearchOut(_Out):
    results: list[SearchHitOut]


class StateOut(_Out):
    status: str
    severity: int | None
    version: int


class WriteOut(_Out):
    """What a write appended (the originals, for a replay) and the scope's state after it. ``entries`` is empty
    when there was nothing to change (e.g. the severity was already that)."""

    scope: str
    entries: list[EntryOut]
    state: StateOut


class ProposalOut(_Out):
    scope: str
    proposal_id: str
    status: Literal["waiting_for_approval", "approved", "denied"]
    existing: bool
    text: str


class DecisionOut(_Out):
    scope: str
    proposal_id: str
    outcome: str = Field(description="approved, approved_waiting, denied, refused, expired, voided, not_waiting, …")
    text: str


class TokenOut(_Out):
    name: str
    scope: Literal["read", "write", "admin"]
    user: str
    created_at: str
    revoked_at: str | None


class TokensOut(_Out):
    tokens: list[TokenOut]


# -- query strings (described; the read routes check them in adapters/http/api.py ``Query``) --------------------


class ListQuery(_In):
    kind: Literal["incident", "change"] | None = None
    status: Literal["open", "recorded", *INCIDENT_STATUSES, *CHANGE_STATUSES] | None = None  # type: ignore[valid-type]
    severity: Literal["1", "2", "3", "4", "sev1", "sev2", "sev3", "sev4"] | None = None
    text: Annotated[str, Field(min_length=1, max_length=200, pattern=r"\S")] | None = None
    limit: int = Field(default=100, ge=1, le=500)
    cursor: Annotated[str, Field(max_length=400)] | None = Field(
        default=None, description="``next`` of the previous page"
    )


class TimelineQuery(_In):
    after: int = Field(default=0, ge=0, le=2**53)
    limit: int = Field(default=100, ge=1, le=1000)
    kind: Annotated[str, Field(min_length=1, max_length=2000, pattern=r"^[a-z_]+(,[a-z_]+)*$")] | None = Field(
        default=None, description="comma-separated entry kinds"
    )


class InsightsQuery(_In):
    since: Annotated[str, Field(pattern=r"^[0-9]{1,4}$")] | None = Field(default=None, description="days, 1-3650")


class SearchQuery(_In):
    q: str = Field(min_length=1, max_length=200, pattern=r"\S")
    limit: int = Field(default=10, ge=1, le=50)
