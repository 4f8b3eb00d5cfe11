"""What views remember between builds, owned by whoever builds them (the agent runtime holds one per process).

Entries are immutable, so what a view read and rendered once need not be read, parsed or rendered again: per
store, the tails of the kind groups views ask for (each turn then reads only what was appended since the last
one) and the entries evidence chains point to; and the brief of each entry. Bounded LRUs; a store that goes
away takes its memo along. A :class:`ViewCache` is an object, not module state: two owners never share one.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from decklog.core.entries import Entry
from decklog.core.views.shapes import render_brief


@dataclass
class Tail:
    """The newest entries of one group of kinds of one scope, as of ``version`` (``count``: how many exist)."""

    version: int
    count: int
    entries: list[Entry]


class StoreMemo:
    """One store's remembered tails and entries (bounded LRUs)."""

    TAILS = 1024
    ENTRIES = 4096

    def __init__(self) -> None:
        self.tails: OrderedDict[tuple[str, tuple[str, ...]], Tail] = OrderedDict()
        self.entries: OrderedDict[tuple[str, int], Entry] = OrderedDict()

    def tail(self, key: tuple[str, tuple[str, ...]]) -> Tail | None:
        found = self.tails.get(key)
        if found is not None:
            self.tails.move_to_end(key)
        return found

    def keep_tail(self, key: tuple[str, tuple[str, ...]], tail: Tail) -> None:
        self.tails[key] = tail
        self.tails.move_to_end(key)
        while len(self.tails) > self.TAILS:
            self.tails.popitem(last=False)

    def keep_entries(self, scope: str, entries: Sequence[Entry]) -> None:
        for e in entries:
            self.entries[(scope, e.seq)] = e
        while len(self.entries) > self.ENTRIES:
            self.entries.popitem(last=False)


class ViewCache:
    """The memo of every store its owner builds views over, and the briefs of the entries it rendered."""

    BRIEFS = 8192

    def __init__(self) -> None:
        self._memos: weakref.WeakKeyDictionary[Any, StoreMemo] = weakref.WeakKeyDictionary()
        self._briefs: OrderedDict[tuple[str, int, str, int], dict[str, Any]] = OrderedDict()

    def memo(self, store: object) -> StoreMemo:
        """The memo of ``store`` (a store that cannot be weakly referenced gets a fresh one each time)."""
        try:
            memo = self._memos.get(store)
            if memo is None:
                memo = self._memos[store] = StoreMemo()
            return memo
        except TypeError:
            return StoreMemo()

    def brief(self, entry: Entry, limit: int) -> dict[str, Any]:
        """:func:`core.views.shapes.render_brief`, remembered by (scope, seq, entry hash, limit); a fresh dict."""
        key = (entry.scope, entry.seq, entry.hash, limit)
        known = self._briefs.get(key)
        if known is None:
            known = self._briefs[key] = render_brief(entry, limit)
            if len(self._briefs) > self.BRIEFS:
                self._briefs.popitem(last=False)
        return dict(known)
