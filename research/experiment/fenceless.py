"""The ``--fences off`` ablation: decklog's own ``Runner`` with its fence taken away, so that a run shows what the
fence prevents ("0 duplicate effects" is earned, not given). Only the experiment builds it; the product's runner
has no way to turn its fence off."""

from __future__ import annotations

from typing_extensions import override

from decklog.core.actions.executor import Executor
from decklog.core.actions.run_authority import RunAuthority
from decklog.core.actions.runner import Runner
from decklog.core.state import ObligationState, ScopeState


class FencelessRunner(Runner):
    """Writes and calls without checking the run's fence or its lease: a holder whose lease passed while it was
    paused (a newer holder claimed meanwhile) still records its results and still calls the target."""

    @override
    def _check(self, s: ScopeState, auth: RunAuthority) -> ObligationState | None:
        return s.obligations.get(auth.obligation_id)

    @override
    def _too_late_to_call(self, auth: RunAuthority, executor: Executor) -> str:
        return ""
