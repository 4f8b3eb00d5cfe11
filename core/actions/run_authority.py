"""The vocabulary of one run (core/actions/runner.py): its fenced authority, its report, its result and the
runner's counters. Pure data; nothing here reads or writes the store."""

from __future__ import annotations

import hashlib
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from core.actions.conditions import Evidence
from core.actions.executor import ExecutionRequest
from core.entries import Actor
from core.state import ScopeState

RUNNER = Actor.system("runner")
DESK_PURPOSES = ("action", "compensation")  # obligations the desk opened for one proposal only


class EvidenceSource(Protocol):
    """What the runner reads besides the scope's state before it acts (``DeskContext.evidence``)."""

    def __call__(
        self, scope: str, state: ScopeState, params: Mapping[str, Any], *, action: str = ...
    ) -> Awaitable[Evidence]: ...


Checkpoint = Callable[[str, "RunAuthority"], Awaitable[None]]


def new_run_id() -> str:
    return f"run-{secrets.token_hex(4)}"


def idempotency_key(scope: str, run_id: str, fence: int) -> str:
    """The key the target dedupes on: derived from run id + fence (and the scope), URL-path safe."""
    tag = hashlib.sha256(scope.encode("utf-8")).hexdigest()[:8]
    return f"{run_id}-f{fence}-{tag}"


@dataclass(frozen=True)
class RunAuthority:
    """The delegated authority of one run: valid only while ``fence`` is the obligation's current, live fence."""

    scope: str
    run_id: str
    receipt: str
    obligation_id: str
    fence: int
    lease_until: datetime
    proposal_id: str
    action: str
    params: dict[str, Any]

    @property
    def holder(self) -> str:
        return f"run:{self.run_id}"

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.scope, self.run_id, self.fence)

    def request(self) -> ExecutionRequest:
        return ExecutionRequest(self.action, self.params, self.scope, self.run_id, self.fence, self.idempotency_key)


@dataclass(frozen=True)
class RunReport:
    """What ``execute`` did, for callers and logs: applied, refused, failed, not_applied, abandon_uncertain,
    skipped, stale (a newer holder took over), busy (someone holds the lease), deferred (the claim was given back:
    too little lease left to call; try again), not_runnable, expired, withdrawn."""

    status: str
    run_id: str = ""
    detail: str = ""


ResultOutcome = Literal["applied", "refused", "uncertain", "not_applied", "abandon_uncertain", "skipped", "failed"]


@dataclass(frozen=True)
class RunResult:
    outcome: ResultOutcome
    digest: str = ""
    response: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    reconciled: bool = False


@dataclass
class RunnerStats:
    claims: int = 0
    calls: int = 0
    stale: int = 0
    reconciles: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
