"""Faults a test programs into the fake deploy service and the fake status page (adapters/local/services/),
through their one hook ``inject(Fault(...))``: ``service_faults(svc).fail_next(500)`` and so on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from decklog.adapters.local.services import ApplyWhen, Fault, FaultOn

__all__ = ["ServiceFaults", "service_faults"]


@dataclass(frozen=True)
class ServiceFaults:
    service: Any  # FakeDeployService | FakeStatuspage: anything with ``inject(Fault)``

    def fail_next(self, status: int = 500, *, reason: str = "", applied: bool = False, on: FaultOn = "effect") -> None:
        """The next request answers ``status``; with ``applied=True`` the effect is applied first (a 5xx
        after the fact — the classic uncertain outcome)."""
        self.service.inject(Fault("fail", status=status, reason=reason, apply="before" if applied else "never", on=on))

    def refuse_next(self, status: int = 422, reason: str = "refused by the fake", *, on: FaultOn = "effect") -> None:
        """The next request gets a 4xx ``{"status": "refused", "reason": ...}``; nothing is applied."""
        if not 400 <= status <= 499:
            raise ValueError("a refusal is a 4xx")
        self.service.inject(Fault("refuse", status=status, reason=reason, on=on))

    def delay_next(self, seconds: float, *, apply: ApplyWhen = "after", on: FaultOn = "effect") -> None:
        """Hold the next response ``seconds`` (past the caller's timeout); see ``Fault``."""
        self.service.inject(Fault("delay", seconds=seconds, apply=apply, on=on))

    def apply_then_drop_next(self) -> None:
        """Apply the next effect, then close the connection without a response."""
        self.service.inject(Fault("drop", apply="before"))

    def drop_next(self, *, applied: bool = False, on: FaultOn = "effect") -> None:
        """Close the connection of the next request without a response (applying first if ``applied``)."""
        self.service.inject(Fault("drop", apply="before" if applied else "never", on=on))


def service_faults(service: Any) -> ServiceFaults:
    return ServiceFaults(service)
