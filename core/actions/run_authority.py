"""The delegated authority of one run: bound to (run id, scheduler receipt, lease, fence), and the idempotency key
the target dedupes on, derived from it. Pure data; nothing here reads or writes the store."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from decklog.core.actions.executor import ExecutionRequest


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
