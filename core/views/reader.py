"""The log reader: the reads a view makes, as few and as short as the log allows, remembered in a ViewCache."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from decklog.core.entries import Entry
from decklog.core.state import ScopeState
from decklog.core.store.ports import LogStore, ScopeRow
from decklog.core.views.cache import Tail, ViewCache
from decklog.core.views.compose import Part
from decklog.core.views.shapes import TEXT_CLIP

ALL_KINDS: tuple[str, ...] = ()  # a group of no kinds means every kind
_REFRESH_MAX = 200  # at most this many new entries are read to refresh remembered tails; more: read afresh


class ScopeListing(Protocol):
    """The part of the index a view reads (the ``IndexPort.list_scopes`` of core/store/ports.py): related incidents."""

    async def list_scopes(
        self, *, kind: str | None = None, updated_since: str | None = None, limit: int | None = 500
    ) -> list[ScopeRow]: ...


class Reader:
    """The reads a view makes: newest entries per kind group, incrementally, skipping kinds the scope has none of."""

    def __init__(self, store: LogStore, state: ScopeState, cache: ViewCache, index: ScopeListing | None = None) -> None:
        self.store = store
        self.index = index
        self.state = state
        self.scope = state.scope
        self.cache = cache
        self.memo = cache.memo(store)

    def over(self, state: ScopeState) -> Reader:
        """A reader of another scope of the same store, sharing this one's cache."""
        return Reader(self.store, state, self.cache, self.index)

    def brief(self, entry: Entry, *, limit: int = TEXT_CLIP) -> dict[str, Any]:
        """:func:`core.views.shapes.brief` through this reader's cache."""
        return self.cache.brief(entry, limit)

    def count(self, *kinds: str) -> int:
        """How many entries of ``kinds`` (of any kind, for none) the scope holds as of the state's version."""
        counts = self.state.kind_counts
        if not kinds or (not counts and self.state.version):
            return self.state.version  # (a state stored before kind counts existed: assume there may be some)
        return sum(counts.get(k, 0) for k in kinds)

    async def last(self, kinds: Sequence[str], limit: int) -> list[Entry]:
        """The newest ``limit`` entries of ``kinds`` as of the state's version (oldest first)."""
        got = await self.many({"_": (tuple(kinds), limit)})
        return got["_"]

    async def recent(self, limit: int) -> list[Entry]:
        """The newest ``limit`` entries of any kind."""
        return await self.last(ALL_KINDS, limit)

    async def many(self, wants: dict[str, tuple[tuple[str, ...], int]]) -> dict[str, list[Entry]]:
        """Several "newest N of these kinds" reads, as cheaply as the log allows.

        ``wants`` maps a name to (kinds, limit). Groups read before only need what was appended since: ONE short
        range read after the oldest remembered version serves them all. Otherwise a group with many entries is
        read from the end of the log; the sparse groups — whose entries could sit anywhere — share ONE query
        limited to how many of them exist (``state.kind_counts``), so that a view pays for at most one long scan.
        """
        out: dict[str, list[Entry]] = {name: [] for name in wants}
        version = self.state.version
        todo: dict[str, tuple[tuple[str, ...], int]] = {}
        tails: dict[str, Tail] = {}
        for name, (kinds, limit) in wants.items():
            if limit <= 0 or self.count(*kinds) == 0:
                continue
            tail = self.memo.tail((self.scope, kinds))
            if tail is not None and tail.version <= version and len(tail.entries) >= min(limit, tail.count):
                tails[name] = tail
            else:
                todo[name] = (kinds, limit)
        if tails:
            since = min(t.version for t in tails.values())
            if version - since <= _REFRESH_MAX:
                rows = await self.store.read(self.scope, after=since, limit=version - since) if version > since else []
                for name, tail in tails.items():
                    kinds, limit = wants[name]
                    new = [e for e in rows if e.seq > tail.version and (not kinds or e.kind in kinds)]
                    out[name] = self._remember(kinds, limit, self.count(*kinds), [*tail.entries, *new])[-limit:]
            else:
                todo.update((name, wants[name]) for name in tails)
        sparse: dict[str, tuple[tuple[str, ...], int]] = {}
        for name, (kinds, limit) in todo.items():
            n = self.count(*kinds)
            if kinds and self.state.kind_counts and n < 4 * limit:
                sparse[name] = (kinds, limit)
                continue
            rows = await self.store.read_last(self.scope, limit=limit, kinds=kinds)
            out[name] = self._remember(kinds, limit, n, [e for e in rows if e.seq <= version])
        if sparse:
            every = tuple(sorted({k for ks, _ in sparse.values() for k in ks}))
            rows = [e for e in await self.store.read_last(self.scope, limit=self.count(*every) + 20, kinds=every)]
            rows = [e for e in rows if e.seq <= version]
            for name, (group, limit) in sparse.items():
                out[name] = self._remember(group, limit, self.count(*group), [e for e in rows if e.kind in group])
        return out

    def _remember(self, kinds: tuple[str, ...], limit: int, n: int, entries: list[Entry]) -> list[Entry]:
        kept = entries[-max(limit, 1) :]
        self.memo.keep_tail((self.scope, kinds), Tail(self.state.version, n, kept))
        return kept

    async def seqs(self, seqs: Sequence[int]) -> list[Entry]:
        wanted = sorted({s for s in seqs if 0 < s <= self.state.version})
        known = {s: self.memo.entries[(self.scope, s)] for s in wanted if (self.scope, s) in self.memo.entries}
        missing = [s for s in wanted if s not in known]
        if missing:
            fetched = await self.store.read_seqs(self.scope, missing)
            self.memo.keep_entries(self.scope, fetched)
            known.update((e.seq, e) for e in fetched)
        return [known[s] for s in wanted if s in known]

    async def chains(self, entries: Sequence[Entry], depth: int = 2) -> dict[int, Entry]:
        """Every entry the given entries point to, transitively up to ``depth`` hops (evidence chains)."""
        found: dict[int, Entry] = {}
        frontier = {r for e in entries for r in e.refs}
        for _ in range(depth):
            frontier -= set(found)
            if not frontier:
                break
            fetched = await self.seqs(sorted(frontier))
            found.update((e.seq, e) for e in fetched)
            frontier = {r for e in fetched for r in e.refs}
        return found


def listed(r: Reader, key: str, entries: list[Entry], *, keep: int, priority: int, kind: str) -> Part:
    """A part listing the briefs of ``entries`` (its noun is ``key``), out of all the scope's entries of ``kind``."""
    items = [r.brief(e) for e in entries]
    return Part(key, items=items, keep=keep, priority=priority, noun=key, total=r.count(kind))
