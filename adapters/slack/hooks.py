"""Ports the Slack listeners call for features that live elsewhere (agents, actions, reports).

The composition root fills them in; a feature that is not wired answers "not available here" instead of failing.
Each hook returns the one-line reply shown to the person who asked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from core.entries import Actor


@dataclass(frozen=True)
class Where:
    """Where a request came from in Slack."""

    channel: str
    user: str
    thread_ts: str = ""
    message_ts: str = ""


AskHook = Callable[[str, str, Actor, Where, str], Awaitable[str]]  # scope, question, actor, where, key
DecideHook = Callable[
    [str | None, str, bool, Actor, str, str], Awaitable[str]
]  # scope, proposal, approve, actor, reason, key
ExportHook = Callable[[str, str, Actor, str], Awaitable[str]]  # scope, format, actor, key
CompensateHook = Callable[[str, str, Actor, str], Awaitable[str]]  # scope, run id, actor, key


@dataclass
class SlackHooks:
    ask: AskHook | None = None
    decide: DecideHook | None = None
    export: ExportHook | None = None
    compensate: CompensateHook | None = None
