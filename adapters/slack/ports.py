"""The typed ports the Slack adapter calls for features that live elsewhere (agents, actions, reports).

Each port is a callable with keyword-only arguments that returns the one-line reply shown to the person who
asked. The composition root fills :class:`SlackPorts` in; a port left ``None`` is a feature that is not wired
here, and the adapter answers "… not available here" instead of failing.

    async def decide(*, scope: str | None, proposal_id: str, approve: bool, actor: Actor, reason: str, key: str) -> str
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from decklog.core.clock import Clock
from decklog.core.entries import Actor
from decklog.core.oncall.setup import OncallConfig


@dataclass(frozen=True)
class Where:
    """Where a request came from in Slack."""

    channel: str
    user: str
    thread_ts: str = ""
    message_ts: str = ""


class Ask(Protocol):
    """``ask <question>``: record the question for the agent; ``key`` is the request's idempotency key."""

    async def __call__(self, *, scope: str, question: str, actor: Actor, where: Where, key: str) -> str: ...


class Decide(Protocol):
    """Approve or deny a parked proposal (``scope`` None: found through the index)."""

    async def __call__(
        self, *, scope: str | None, proposal_id: str, approve: bool, actor: Actor, reason: str, key: str
    ) -> str: ...


class Export(Protocol):
    """Upload the post-incident report in ``fmt`` (md, json or html) to the incident's thread."""

    async def __call__(self, *, scope: str, fmt: str, actor: Actor, key: str) -> str: ...


class Compensate(Protocol):
    """Propose the compensation of the action run ``run_id``."""

    async def __call__(self, *, scope: str, run_id: str, actor: Actor, key: str) -> str: ...


class Propose(Protocol):
    """``run <action> [key=value …]``: propose a catalog action through the desk's policy (R1 runs, R2/R3 park,
    R4 is refused with its reason); bad parameters raise ``InvalidInput`` naming the parameter."""

    async def __call__(self, *, scope: str, action: str, params: dict[str, str], actor: Actor, key: str) -> str: ...


class Actions(Protocol):
    """``actions``: the catalog with risk, parameters and availability."""

    async def __call__(self) -> str: ...


class Catchup(Protocol):
    """``catch me up`` with a model: a bounded summary of the joiner view, its provenance recorded like a turn."""

    async def __call__(self, *, scope: str, actor: Actor, key: str) -> str: ...


@dataclass(frozen=True)
class Oncall:
    """On-call (core/oncall/): the configuration the commands and buttons read, and the clock overrides start at."""

    setup: OncallConfig
    clock: Clock


@dataclass
class SlackPorts:
    ask: Ask | None = None
    decide: Decide | None = None
    export: Export | None = None
    compensate: Compensate | None = None
    propose: Propose | None = None  # None → `run` answers "Actions are not available here."
    actions: Actions | None = None  # None → `actions` answers the same
    catchup: Catchup | None = None  # None → the deterministic catch-up
    oncall: Oncall | None = None  # /incident oncall, page, ack; the page DM's buttons
