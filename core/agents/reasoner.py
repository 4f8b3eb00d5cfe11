"""The Reasoner protocol: what one agent turn gets (``TurnInput``) and gives back (``TurnOutput``).

A reasoner never writes to the log and never executes an action. It reads task-scoped views (and, for a model,
R1 tools), and returns *intents* — hypotheses, suggestions, obligations, proposals, verifications, an answer —
that the turn runtime (core/agents/runtime.py) records as entries under a compare-and-set, or hands to the
``Proposer`` port. Two implementations: ``RuleBasedReasoner`` (core/agents/rules.py, the default, no key) and
``ClaudeReasoner`` (adapters/anthropic/).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from decklog.core.state import ScopeState

if TYPE_CHECKING:
    from decklog.core.agents.past import PastLogs
    from decklog.core.agents.ports import ActionInfo
    from decklog.core.agents.tool_specs import ToolResult, ToolSpec
    from decklog.core.evidence.observer import Evidence
    from decklog.core.store.ports import IndexPort
    from decklog.core.views import View

VerificationOutcome = Literal["verified", "failed", "inconclusive"]


@dataclass(frozen=True)
class HypothesisIntent:
    """``subject``: the service or change it names; ``rank``: 1 = the turn's most likely cause (0: unranked);
    ``observations``: indexes into the turn's ``Evidence.observations`` it rests on (recorded as refs)."""

    text: str
    confidence: float | None = None
    suspect_scope: str = ""
    refs: tuple[int, ...] = ()
    subject: str = ""
    rank: int = 0
    observations: tuple[int, ...] = ()


@dataclass(frozen=True)
class SuggestionIntent:
    """A suggestion to the humans (Accept / Dismiss in Slack). ``action="resolve"`` resolves when accepted."""

    text: str
    action: str = ""
    rationale: str = ""
    refs: tuple[int, ...] = ()
    suggestion_id: str = ""  # the runtime makes one when empty


@dataclass(frozen=True)
class ObligationIntent:
    """Unfinished work to record. ``hypothesis_index`` points at a hypothesis of the same turn (its evidence)."""

    text: str
    purpose: str = "task"
    conditions: tuple[str, ...] = ()
    action: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    expected_outcome: str = ""
    refs: tuple[int, ...] = ()
    obligation_id: str = ""  # the runtime makes one when empty
    hypothesis_index: int | None = None


@dataclass(frozen=True)
class ProposalIntent:
    """Ask the action desk (``Proposer``) to propose ``action``; it parks for approval, it never runs here."""

    action: str
    params: dict[str, Any]
    rationale: str = ""
    obligation_id: str = ""


@dataclass(frozen=True)
class VerificationIntent:
    """The outcome of checking a verification obligation (claimed and fulfilled under a fence by the runtime)."""

    obligation_id: str
    outcome: VerificationOutcome
    run_id: str = ""
    expected: str = ""
    observed: str = ""
    refs: tuple[int, ...] = ()


@dataclass
class Collected:
    """The intents the writing tools gathered during a turn."""

    hypotheses: list[HypothesisIntent] = field(default_factory=list)
    suggestions: list[SuggestionIntent] = field(default_factory=list)
    obligations: list[ObligationIntent] = field(default_factory=list)
    proposals: list[ProposalIntent] = field(default_factory=list)


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_input_tokens += other.cache_read_input_tokens
        self.cache_creation_input_tokens += other.cache_creation_input_tokens

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens


@dataclass
class TurnOutput:
    """What a turn produced. ``outcome``: ``ok`` | ``failed`` | ``refused``; ``wake_after``: seconds after which
    the reasoner wants another look even if nothing new arrives (a verification grace period, an idle nudge)."""

    hypotheses: list[HypothesisIntent] = field(default_factory=list)
    suggestions: list[SuggestionIntent] = field(default_factory=list)
    obligations: list[ObligationIntent] = field(default_factory=list)
    proposals: list[ProposalIntent] = field(default_factory=list)
    verifications: list[VerificationIntent] = field(default_factory=list)
    answer: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    cost_usd: float = 0.0
    outcome: str = "ok"
    error: str = ""
    wake_after: float | None = None

    @property
    def intents(self) -> int:
        return (
            len(self.hypotheses)
            + len(self.suggestions)
            + len(self.obligations)
            + len(self.proposals)
            + len(self.verifications)
            + (1 if self.answer else 0)
        )

    @property
    def spent(self) -> bool:
        """Did the turn cost something worth recording (model tokens)?"""
        return self.usage.total > 0

    def wake(self, seconds: float) -> None:
        """Ask for another look in ``seconds`` (the earliest request wins)."""
        seconds = max(0.0, seconds)
        self.wake_after = seconds if self.wake_after is None else min(self.wake_after, seconds)


class ReasonerError(Exception):
    """A turn could not complete (model API down, 429/529, timeout, a refusal to continue). ``partial`` keeps the
    usage and tool calls spent before the failure so that the failed turn's provenance is complete."""

    def __init__(self, message: str, *, partial: TurnOutput | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.partial = partial
        self.retry_after = retry_after


class ViewReader(Protocol):
    """How a reasoner reads views during a turn (the runtime builds each at most once and accounts for it)."""

    async def view(self, name: str, *, obligation_id: str | None = None) -> View: ...


class Tools(Protocol):
    """The tools of one turn as a model reasoner uses them (``core.agents.tools.ToolBox``): their specs, a call by
    name, the provenance of every call, and the intents the writing tools gathered."""

    calls: list[dict[str, Any]]
    collected: Collected

    def specs(self) -> list[ToolSpec]: ...

    async def call(self, name: str, args: Any) -> ToolResult: ...


@dataclass
class TurnInput:
    """One turn: the scope's state when it started, the range it covers, what triggered it, and its reading ports.

    ``catalog`` is ``None`` when no action catalog is wired (proposals then only become suggestions), else the
    actions that may be proposed. ``question`` is set for ask turns.
    """

    scope: str
    state: ScopeState
    trigger: str
    now: datetime
    views: ViewReader
    seq_from: int = 0
    seq_to: int = 0
    question: str = ""
    catalog: list[ActionInfo] | None = None
    tools: Tools | None = None
    evidence: Evidence | None = None  # the outside read tools (None: no source is configured)
    index: IndexPort | None = None  # changes and past incidents
    logs: PastLogs | None = None  # other scopes' logs, read only (what past incidents teach: core/agents/past.py)

    def may_propose(self, action: str) -> bool:
        return self.catalog is None or any(a.name == action for a in self.catalog)

    def action_info(self, action: str) -> ActionInfo | None:
        return next((a for a in self.catalog or [] if a.name == action), None)


class Reasoner(Protocol):
    """``name`` and ``model`` go into each turn's provenance; ``wants_wakes``: whether it ever asks for timers."""

    name: str
    model: str
    wants_wakes: bool

    async def run(self, turn: TurnInput) -> TurnOutput: ...
