"""What every room of the action desk shares: the store and index, the catalog and policy, the clock, and the
facts they read from outside a scope's own state (linked change scopes, Slack user-group memberships)."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from decklog.core.actions.catalog import Catalog
from decklog.core.actions.conditions import RELATED_RUNS, ChangeFact, Evidence, RelatedRun
from decklog.core.actions.policy import ApproverPolicy
from decklog.core.clock import Clock
from decklog.core.entries import Actor
from decklog.core.errors import NotFound
from decklog.core.state import ScopeState
from decklog.core.store.ports import IndexPort, LogStore
from decklog.core.views.cache import ViewCache
from decklog.core.views.reader import Reader
from decklog.core.views.related import related_actions, target_of

log = logging.getLogger("decklog.core.actions.desk")

GroupResolver = Callable[[str], Awaitable[frozenset[str]]]  # Slack user group id → its members' user ids
APPROVALS = Actor.system("approvals")
VERIFIER = Actor.agent("verifier", "rule-based verifier")


def new_proposal_id() -> str:
    return f"p-{secrets.token_hex(3)}"


@dataclass
class DeskContext:
    """The desk's collaborators (``groups`` may be replaced after construction: the desk's ``groups`` writes it)."""

    store: LogStore
    index: IndexPort | None
    catalog: Catalog
    policy: ApproverPolicy
    clock: Clock
    groups: GroupResolver | None = None

    async def evidence(self, scope: str, state: ScopeState, params: Mapping[str, Any], *, action: str = "") -> Evidence:
        """Facts from outside the scope's own state: the change scopes linked to it or touching the service, and
        (when ``action``'s conditions ask for them) its runs on the same target in related incidents."""
        changes = await self._changes(state, params)
        related = await self._related_runs(state, params, action) if self._wants_related(action) else ()
        return Evidence(changes, related)

    def _wants_related(self, action: str) -> bool:
        return bool(action) and action in self.catalog and (RELATED_RUNS in self.catalog.get(action).safety_conditions)

    async def _related_runs(self, state: ScopeState, params: Mapping[str, Any], action: str) -> tuple[RelatedRun, ...]:
        reader = Reader(self.store, state, ViewCache(), self.index)
        runs = await related_actions(reader, target=(action, target_of(params)))
        return tuple(
            RelatedRun(r["scope"], r["outcome"], r["at"], r["ref"], r["relation"])
            for r in runs
            if r["outcome"] in ("applied", "uncertain")
        )

    async def _changes(self, state: ScopeState, params: Mapping[str, Any]) -> tuple[ChangeFact, ...]:
        facts: dict[str, ChangeFact] = {}
        for other in state.linked:
            if not other.startswith("change/"):
                continue
            try:
                cs = await self.store.get_state(other)
            except NotFound:
                continue
            facts[other] = ChangeFact(other, cs.services, cs.created_at, cs.status, cs.title)
        service = str(params.get("service") or "")
        if service and self.index is not None:
            for row in await self.index.list_scopes(kind="change", service=service, limit=200):
                facts.setdefault(row.id, ChangeFact(row.id, row.services, row.created_at, row.status, row.title))
        return tuple(sorted(facts.values(), key=lambda c: c.scope))

    async def memberships(self, user_id: str, action_group: str) -> frozenset[str]:
        """The Slack user groups (of those that may approve) that ``user_id`` belongs to."""
        slack_groups = self.policy.slack_groups(action_group)
        if self.groups is None:
            if slack_groups:
                log.warning("approvals: Slack user groups %s are configured but cannot be resolved here", slack_groups)
            return frozenset()
        out = set()
        for group in slack_groups:
            try:
                if user_id in await self.groups(group):
                    out.add(group)
            except Exception:
                log.warning("approvals: could not read the members of Slack user group %s", group, exc_info=True)
        return frozenset(out)
