"""Actions under delegated authority: the catalog, the approval policy, safety conditions, the runner, the desk.

Nothing here performs I/O of its own except through ports: the log store, and ``Executor`` adapters
(``adapters/executors/``). See ``ActionDesk`` for the entry points.
"""

from decklog.core.actions.catalog import ActionSpec, Catalog, CompensationSpec, ExecutorSpec
from decklog.core.actions.conditions import CONDITIONS, ChangeFact, CheckResult, Evidence
from decklog.core.actions.context import GroupResolver
from decklog.core.actions.desk import ActionDesk
from decklog.core.actions.executor import (
    CheckedOptions,
    ExecutionOutcome,
    ExecutionRequest,
    Executor,
    ExecutorType,
    ReconcileOutcome,
)
from decklog.core.actions.outcomes import (
    ActionInfo,
    CompensationKind,
    CompensationOutcome,
    DecisionKind,
    DecisionOutcome,
    Proposed,
    SweepReport,
    Verified,
)
from decklog.core.actions.policy import ApproverPolicy
from decklog.core.actions.run_authority import RunAuthority, idempotency_key
from decklog.core.actions.runner import Runner, RunReport

__all__ = [
    "CONDITIONS",
    "ActionDesk",
    "ActionInfo",
    "ActionSpec",
    "ApproverPolicy",
    "Catalog",
    "ChangeFact",
    "CheckResult",
    "CheckedOptions",
    "CompensationKind",
    "CompensationOutcome",
    "CompensationSpec",
    "DecisionKind",
    "DecisionOutcome",
    "Evidence",
    "ExecutionOutcome",
    "ExecutionRequest",
    "Executor",
    "ExecutorSpec",
    "ExecutorType",
    "GroupResolver",
    "Proposed",
    "ReconcileOutcome",
    "RunAuthority",
    "RunReport",
    "Runner",
    "SweepReport",
    "Verified",
    "idempotency_key",
]
