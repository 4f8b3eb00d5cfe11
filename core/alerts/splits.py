"""A notification split by service (``batch.partition``): its incidents fan out from one parent.

The first part of a split notification that lands in an incident (not the source's storm incident) makes that
incident the *parent*. Every later part of it that opens an incident is declared with a ``scope_linked`` entry to
the parent (relation ``split_from``) in the declaration's own transaction. The parent gets the other direction
(``split_into``) for each child and one line naming them, in one transaction at the end of the request
(``SplitLinks.link``) — and, should the process die before that, from the ``changes`` outbox topic's delivery of
each child's declaration (``SplitLinks.back_link``, called by ``core.changes.links``), so a crash delays a back-link
but never loses it. Both check ``state.linked`` inside the append: nothing is linked twice.

So N incidents of one notification make N − 1 links each way, not N·(N − 1) (a 50-service notification used to make
2,450), and Slack shows one line in the parent's thread: the links themselves are quiet (``QUIET_RELATIONS``; each
header's "Linked" field shows them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from decklog.core.alerts.batch import link_entry, source_name
from decklog.core.alerts.rules import ALERTS_ACTOR, SUMMARY_SOURCE
from decklog.core.entries import NewEntry, Observation, ScopeLinked
from decklog.core.errors import NotFound
from decklog.core.state import ScopeState
from decklog.core.store.ports import LogStore

SPLIT_FROM = "split_from"  # a child's link to its parent
SPLIT_INTO = "split_into"  # the parent's link to each child
#: Link relations Slack does not post a thread line for (the parent's one line and the headers show them).
QUIET_RELATIONS = frozenset({SPLIT_FROM, SPLIT_INTO})
NAMED = 10  # children named in the parent's line (the rest are counted)
CHILD_LINKS_READ = 8  # a child's first scope_linked entries, where its split_from link is


@dataclass
class Family:
    """One split notification in one request: the parent incident and the incidents declared as its children."""

    source: str
    parent: str = ""
    children: list[tuple[str, str]] = field(default_factory=list)  # (scope, service), in declaration order


def reason(source: str) -> str:
    return f"the same {source_name(source)} notification, another service"


def parent_link(family: Family) -> list[NewEntry]:
    """The link a child is declared with: to the family's parent (none while it has no parent)."""
    if not family.parent:
        return []
    return [link_entry(family.parent, SPLIT_FROM, reason(family.source), family.source)]


def parent_line(source: str, children: Sequence[tuple[str, str]]) -> Observation:
    """The parent's one thread line about its children."""
    named = ", ".join(f"{service or '?'} (`{scope}`)" for scope, service in children[:NAMED])
    more = f", +{len(children) - NAMED} more" if len(children) > NAMED else ""
    n = len(children)
    text = (
        f"The same {source_name(source)} notification opened {n} more incident{'s' if n != 1 else ''}, one per "
        f"service: {named}{more}. Each is linked to this one."
    )
    data = {"split": {"source": source, "children": [scope for scope, _ in children]}}
    return Observation(text=text, source=SUMMARY_SOURCE, data=data)


class SplitLinks:
    def __init__(self, store: LogStore) -> None:
        self.store = store

    async def link(self, family: Family) -> None:
        """At the end of the request: the parent's links to this request's children, and one line naming them
        (one transaction; links already made by ``back_link`` are not made again)."""
        if not family.parent or not family.children:
            return
        children = list(family.children)

        def decide(state: ScopeState) -> list[NewEntry]:
            if state.kind != "incident":
                return []
            out = [
                link_entry(scope, SPLIT_INTO, reason(family.source), family.source)
                for scope, _ in children
                if scope not in state.linked
            ]
            out.append(NewEntry.make("observation", ALERTS_ACTOR, parent_line(family.source, children)))
            return out

        try:
            await self.store.append(family.parent, decide)
        except NotFound:
            return

    async def back_link(self, child: str) -> int:
        """A child's declaration was delivered (``changes`` topic): link its parent back to it if that has not
        happened yet (the request died before ``link``). Returns how many links it appended."""
        made = 0
        for entry in await self.store.read(child, kinds=("scope_linked",), limit=CHILD_LINKS_READ):
            p = entry.payload
            if not isinstance(p, ScopeLinked) or p.relation != SPLIT_FROM:
                continue
            source = entry.actor.id

            def decide(state: ScopeState, p: ScopeLinked = p, source: str = source) -> list[NewEntry]:
                if state.kind != "incident" or child in state.linked:
                    return []
                return [link_entry(child, SPLIT_INTO, p.reason or reason(source), source)]

            try:
                result = await self.store.append(p.scope, decide)
            except NotFound:
                continue
            made += len(result.entries) if not result.duplicate else 0
        return made
