"""What the Slack listeners need, passed in by the composition root (no globals)."""

from __future__ import annotations

from dataclasses import dataclass

from adapters.slack.hooks import SlackHooks
from adapters.slack.runner import CommandRunner
from core.index import Index
from core.service import ScopeService
from core.store import LogStore


@dataclass
class SlackDeps:
    service: ScopeService
    store: LogStore
    index: Index
    hooks: SlackHooks
    runner: CommandRunner
    counters: dict[str, int]

    def count(self, name: str) -> None:
        self.counters[name] = self.counters.get(name, 0) + 1
