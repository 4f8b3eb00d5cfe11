"""The text the index keeps of an entry for full-text search, and the words a search looks for (each backend
turns them into its own query: FTS5 ``MATCH`` or ``to_tsquery``)."""

from __future__ import annotations

import re

from decklog.core.entries import Entry, Observation


def searchable_text(entry: Entry) -> str:
    parts = [entry.text]
    p = entry.payload
    if isinstance(p, Observation):
        parts.extend([p.service, *(f"{k}={v}" for k, v in sorted(p.labels.items()))])
    return " ".join(x for x in parts if x)


def search_words(text: str) -> list[str]:
    """The words of free text worth searching for (two characters or more, at most 32), lower-cased."""
    return [w for w in re.findall(r"[\w.-]+", text.lower()) if len(w) > 1][:32]
