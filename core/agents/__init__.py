"""Agent turns: short-lived executions with no memory that read task-scoped views, reason, and append entries.

- ``reasoner``: the ``Reasoner`` protocol, ``TurnInput`` / ``TurnOutput`` and the intents a turn returns.
- ``rules``: ``RuleBasedReasoner``, the deterministic default (no API key).
- ``runtime``: ``TurnRuntime`` — runs a turn, records its outputs and its ``agent_turn`` under a compare-and-set.
- ``scheduler``: ``TurnScheduler`` (debounce, boot re-arm) and ``AgentsSender`` (the ``agents`` outbox sender).
- ``context``: ``ContextAgents`` — similar past incidents and recent changes, appended as evidence.
- ``tools``: the R1 read tools and the intent tools a model reasoner calls.
- ``ports``: ``Proposer`` and ``ActionCatalogView`` (the action desk plugs in there).
"""

from decklog.core.agents.agents_sender import AgentsSender
from decklog.core.agents.context import ContextAgents
from decklog.core.agents.ports import ActionCatalogView, ActionInfo, EmptyCatalog, Proposer, SuggestingProposer
from decklog.core.agents.reasoner import (
    HypothesisIntent,
    ObligationIntent,
    ProposalIntent,
    Reasoner,
    ReasonerError,
    SuggestionIntent,
    TurnInput,
    TurnOutput,
    Usage,
    VerificationIntent,
)
from decklog.core.agents.rules import RuleBasedReasoner
from decklog.core.agents.runtime import TurnRuntime
from decklog.core.agents.scheduler import TurnScheduler
from decklog.core.agents.tool_specs import ToolResult
from decklog.core.agents.tools import ToolBox
from decklog.core.agents.turn_parts import TurnRaced, TurnResult

__all__ = [
    "ActionCatalogView",
    "ActionInfo",
    "AgentsSender",
    "ContextAgents",
    "EmptyCatalog",
    "HypothesisIntent",
    "ObligationIntent",
    "ProposalIntent",
    "Proposer",
    "Reasoner",
    "ReasonerError",
    "RuleBasedReasoner",
    "SuggestingProposer",
    "SuggestionIntent",
    "ToolBox",
    "ToolResult",
    "TurnInput",
    "TurnOutput",
    "TurnRaced",
    "TurnResult",
    "TurnRuntime",
    "TurnScheduler",
    "Usage",
    "VerificationIntent",
]
