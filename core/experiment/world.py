"""The deterministic world, the oracle: which actions mitigate or harm, and its own effect counters."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from core.experiment.scenario import Scenario, action_key


class WorldSim:
    def __init__(self, scenario: Scenario, *, fences: bool = True) -> None:
        self.scenario = scenario
        self.fences = fences
        self.applied: Counter[str] = Counter()
        self.refused = 0
        self.harmful = 0
        self.mitigated = False
        self._fence: dict[str, int] = {}
        self._good = {m.key() for m in scenario.world.mitigations}
        self._bad = {h.key() for h in scenario.world.harmful}
        self._resolve_at: datetime | None = None
        self._resolved = False

    def apply(self, action: str, params: dict[str, Any], *, fence: int, resource: str) -> str:
        """Apply an effect; a fenced resource refuses a token older than the newest it has seen."""
        if self.fences and fence < self._fence.get(resource, 0):
            self.refused += 1
            return "refused"
        self._fence[resource] = max(self._fence.get(resource, 0), fence)
        key = action_key(action, params)
        self.applied[key] += 1
        self.harmful += key in self._bad
        self.mitigated = self.mitigated or key in self._good
        return "applied"

    def schedule_resolution(self, now: datetime) -> None:
        if self._resolve_at is None:
            self._resolve_at = now + timedelta(seconds=self.scenario.world.resolve_after)

    def next_due(self) -> datetime | None:
        return self._resolve_at if self._resolve_at is not None and not self._resolved else None

    def due_resolutions(self, now: datetime) -> tuple[str, ...]:
        """The alerts that resolve now: once, when the mitigation has had ``resolve_after`` seconds."""
        if self._resolve_at is None or self._resolved or now < self._resolve_at:
            return ()
        self._resolved = True
        return self.scenario.world.resolves

    def observe(self, action: str, params: dict[str, Any]) -> bool:
        """Reconcile: was this effect applied?"""
        return self.applied[action_key(action, params)] > 0

    def counters(self) -> dict[str, Any]:
        return {
            "applied": dict(self.applied),
            "refused": self.refused,
            "harmful": self.harmful,
            "mitigated": self.mitigated,
        }
