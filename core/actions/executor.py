"""The executor port: how core asks an adapter to carry out one run, and what it may answer.

An executor reports exactly one of four outcomes, and never retries on its own:

- ``applied`` — the target confirmed the effect (the recorded response; ``effect_digest`` identifies it);
- ``refused`` — the target said no (4xx), nothing was applied;
- ``failed`` — the request never reached the target (no connection could be made, or the egress allowlist of
  ``core/egress.py`` refused its host before anything was sent), nothing was applied;
- ``uncertain`` — no answer we can trust (timeout, lost connection, 5xx): the effect may or may not exist.

``reconcile`` asks the target what is actually true for an idempotency key, where the target supports it.
Implementations live in ``adapters/executors/`` (``http``, ``statuspage``, ``pagerduty``), one module per type.

``ExecutorType`` is what the catalog asks of such an adapter when it reads ``[[actions]]``: whether the options
written under ``[actions.executor]`` are the type's, and whether they can run here. Core knows no type by name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from decklog.core.entries import canonical_json

Outcome = Literal["applied", "refused", "failed", "uncertain"]
ReconcileStatus = Literal["applied", "not_applied", "unknown"]


@dataclass(frozen=True)
class ExecutionRequest:
    """One run's call. ``wire()`` is the JSON body of the ``http`` protocol (DESIGN §7)."""

    action: str
    params: dict[str, Any]
    scope: str
    run_id: str
    fence: int
    idempotency_key: str

    def wire(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "params": self.params,
            "scope": self.scope,
            "run_id": self.run_id,
            "fence": self.fence,
            "idempotency_key": self.idempotency_key,
        }


@dataclass(frozen=True)
class ExecutionOutcome:
    outcome: Outcome
    status: int | None = None
    response: dict[str, Any] = field(default_factory=dict)
    effect_digest: str = ""
    error: str = ""


@dataclass(frozen=True)
class ReconcileOutcome:
    status: ReconcileStatus
    response: dict[str, Any] = field(default_factory=dict)
    effect_digest: str = ""
    error: str = ""


class Executor(Protocol):
    """Carries out runs of one action. ``can_reconcile`` says whether ``reconcile`` can ever answer."""

    kind: str
    timeout: float

    @property
    def can_reconcile(self) -> bool: ...

    async def execute(self, request: ExecutionRequest) -> ExecutionOutcome: ...

    async def reconcile(self, request: ExecutionRequest) -> ReconcileOutcome: ...


@dataclass(frozen=True)
class CheckedOptions:
    """An executor's options as its type validated them: ``options`` (defaults filled in), the ``urls`` it calls (the
    egress allowlist's default hosts), and why it cannot run here (``unavailable``; "" when it can)."""

    options: dict[str, Any]
    urls: tuple[str, ...] = ()
    unavailable: str = ""


class ExecutorType(Protocol):
    """One executor type as the catalog sees it (``adapters/executors`` registers one per ``type``)."""

    def check(self, options: Mapping[str, Any], unset: Mapping[str, str]) -> CheckedOptions:
        """``options``: the ``[actions.executor]`` keys besides ``type`` and ``timeout_s``, the environment
        substituted; ``unset``: each option that referenced an unset environment variable, with that variable.
        Options of the type that cannot run here (a URL not configured) are unavailable, not invalid; invalid ones
        raise ``InvalidInput`` whose ``field`` is the option's key."""
        ...


def digest_bytes(body: bytes) -> str:
    """The effect digest: sha256 of the response body exactly as received."""
    return "sha256:" + hashlib.sha256(body).hexdigest()


def digest_json(value: Any) -> str:
    """The digest of a reconciled effect: sha256 of its canonical JSON (the original bytes are not available)."""
    return "sha256:" + hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
