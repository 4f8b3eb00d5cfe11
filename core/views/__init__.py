"""Views: task-scoped projections of a scope's log that a short-lived agent reads instead of the whole history.

A view is built from the stored state (``ScopeState``: status, alerts, obligations, proposals, roles, counts per
kind) plus the few entries it needs, fetched with ``read_last`` / ``read_seqs`` and kind filters — never a replay
of the log. Each view has a byte budget; when its content does not fit, the oldest items of its least important
lists are dropped and the drop is summarised (``+ 4,812 earlier messages omitted``), never silent. Its size in
bytes (and an estimate in tokens) is reported with it.

Views: ``triage`` (goal, constraints, recent observations, open obligations), ``investigation`` (hypotheses with
their evidence chains, linked change scopes, similar incidents, actions run in related incidents), ``action`` (one
obligation with its evidence and safety conditions, and the runs of its action on its target in related incidents), ``verification`` (decision, expected outcome, recorded result, later evidence) and ``joiner``
(what a newcomer needs: state, last decisions, open obligations, who holds what)::

    view = await build_view(store, "incident/payments-5xx", "joiner", budget=12_000)
    view.text        # what the agent reads (compact JSON)
    view.bytes       # len(view.text.encode())

The package, room by room: ``compose`` (parts, byte budget, omission lines), ``reader`` (the reads a view makes),
``cache`` (what builds remember: a :class:`ViewCache` owned by whoever builds views, never module state),
``shapes`` (the compact JSON of entries, obligations, alerts), and one module per view. Whoever builds views
repeatedly (the agent runtime) holds one :class:`Views` — or one :class:`ViewCache` it passes to
:func:`build_view` — so that a turn reads only what was appended since the last one.
"""

from __future__ import annotations

from decklog.core.state import ScopeState
from decklog.core.store.ports import LogStore
from decklog.core.views.action import action, pick_obligation
from decklog.core.views.cache import ViewCache
from decklog.core.views.compose import DEFAULT_BUDGET, VIEW_NAMES, Part, View, compose, plural
from decklog.core.views.investigation import CONTEXT_MEMO_KEY, CONTEXT_MEMO_TOPIC, CONTEXT_SOURCE, investigation
from decklog.core.views.joiner import TIMELINE_KINDS, joiner
from decklog.core.views.reader import Reader, ScopeListing
from decklog.core.views.related import FINDING, applied_in, finding_text, target_of
from decklog.core.views.shapes import at_text, brief, change_json, clip, header, obligation_json, who
from decklog.core.views.triage import triage
from decklog.core.views.verification import verification


async def build_view(
    store: LogStore,
    scope: str,
    name: str,
    *,
    budget: int = DEFAULT_BUDGET,
    obligation_id: str | None = None,
    state: ScopeState | None = None,
    cache: ViewCache | None = None,
    index: ScopeListing | None = None,
) -> View:
    """Build view ``name`` of ``scope`` (``obligation_id`` picks the obligation of an action/verification view).

    ``cache``: what earlier builds remembered (without one, this build remembers only for itself). ``index``: where
    the related incidents of ``investigation`` / ``action`` are found (without one, the linked incidents only)."""
    if name not in VIEW_NAMES:
        raise ValueError(f"unknown view {name!r} (views: {', '.join(VIEW_NAMES)})")
    state = state or await store.get_state(scope)
    reader = Reader(store, state, cache if cache is not None else ViewCache(), index)
    if name == "triage":
        parts = await triage(reader)
    elif name == "investigation":
        parts = await investigation(reader)
    elif name == "action":
        parts = await action(reader, obligation_id)
    elif name == "verification":
        parts = await verification(reader, obligation_id)
    else:
        parts = await joiner(reader)
    return compose(name, state.scope, state.version, parts, budget)


class Views:
    """Views over one store, remembering between builds in the :class:`ViewCache` this object owns."""

    def __init__(self, store: LogStore, cache: ViewCache | None = None, index: ScopeListing | None = None) -> None:
        self.store = store
        self.cache = cache if cache is not None else ViewCache()
        self.index = index

    async def build(
        self,
        scope: str,
        name: str,
        *,
        budget: int = DEFAULT_BUDGET,
        obligation_id: str | None = None,
        state: ScopeState | None = None,
    ) -> View:
        return await build_view(
            self.store,
            scope,
            name,
            budget=budget,
            obligation_id=obligation_id,
            state=state,
            cache=self.cache,
            index=self.index,
        )


__all__ = [
    "CONTEXT_MEMO_KEY",
    "CONTEXT_MEMO_TOPIC",
    "CONTEXT_SOURCE",
    "DEFAULT_BUDGET",
    "FINDING",
    "TIMELINE_KINDS",
    "VIEW_NAMES",
    "Part",
    "ScopeListing",
    "View",
    "ViewCache",
    "Views",
    "applied_in",
    "at_text",
    "brief",
    "build_view",
    "change_json",
    "clip",
    "compose",
    "finding_text",
    "header",
    "obligation_json",
    "pick_obligation",
    "plural",
    "target_of",
    "who",
]
