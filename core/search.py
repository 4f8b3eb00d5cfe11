"""Search past incidents (``/incident search``, ``GET /api/search``): the index's full-text search (FTS5 on
SQLite, ``tsvector`` on PostgreSQL) over titles, messages, evidence, hypotheses, decisions and the other typed
entries people write, in incident scopes only."""

from __future__ import annotations

import re
from typing import Any

from decklog.core.errors import InvalidInput
from decklog.core.index.text import search_words
from decklog.core.store.ports import IndexPort

_ALNUM_PAIR = re.compile(r"[^\W_]{2}")  # a word worth looking for: two letters or digits in a row
SEARCH_LIMIT, SEARCH_MAX, SEARCH_MAX_LEN = 10, 50, 200
#: Entry kinds searched: ``declared`` carries the title.
SEARCH_KINDS = (
    "declared",
    "message",
    "evidence",
    "hypothesis",
    "decision",
    "goal",
    "constraint",
    "follow_up",
)


async def search_incidents(index: IndexPort, text: str, *, limit: int = SEARCH_LIMIT) -> list[dict[str, Any]]:
    """The best ``limit`` matches, each ``{"scope", "title", "seq", "kind", "snippet"}``."""
    if not search_words(text) or not _ALNUM_PAIR.search(text):
        raise InvalidInput("has no word to search for (words of two or more letters or digits)", field="q")
    hits = await index.search(text, limit=limit, scope_kind="incident", kinds=SEARCH_KINDS)
    titles = await index.titles([h.scope for h in hits])
    return [
        {
            "scope": h.scope,
            "title": titles.get(h.scope, ""),
            "seq": h.seq,
            "kind": h.kind,
            "snippet": " ".join(h.snippet.split()),
        }
        for h in hits
    ]
