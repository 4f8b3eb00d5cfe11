"""The deterministic world, the oracle: which actions mitigate or harm, and its own effect counters."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from research.experiment.scenario import Scenario, action_key


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
        self._again: dict[str, datetime] = {}  # an alert that fired after the resolution -> when it clears

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

    def fired(self, fingerprint: str, now: datetime) -> None:
        """A timeline alert fired. One the mitigation covers that fires after the world resolved (a late or
        flapping notification of a cause already fixed) clears again ``resolve_after`` later, as it would."""
        if self._resolved and fingerprint in self.scenario.world.resolves:
            self._again.setdefault(fingerprint, now + timedelta(seconds=self.scenario.world.resolve_after))

    def next_due(self) -> datetime | None:
        due = [*self._again.values(), *([self._resolve_at] if self._resolve_at and not self._resolved else [])]
        return min(due) if due else None

    def due_resolutions(self, now: datetime) -> tuple[str, ...]:
        """The alerts that resolve now: those the mitigation covers, once it has had ``resolve_after`` seconds;
        then each one that fired again after that, ``resolve_after`` after it did."""
        again = tuple(fp for fp, at in sorted(self._again.items()) if at <= now)
        for fp in again:
            del self._again[fp]
        if self._resolve_at is None or self._resolved or now < self._resolve_at:
            return again
        self._resolved = True
        return self.scenario.world.resolves + again

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
