"""The sender of an outbox topic that is not configured in this deployment (no PagerDuty key, no tracker).

The server gives such a topic no rows (``bot.topics``), but rows can exist anyway: written before that rule, or by
a ``decklog`` command, which cannot know what the server is configured with and so writes rows for every topic.
``NotConfigured`` takes them and does nothing, so that they are done instead of pending for ever (``decklog
doctor`` would list every incident, and a resolved incident's file would never be compacted). If the sender is
configured later, it acts on what is recorded from then on, not on what happened while it was not there.
"""

from __future__ import annotations

from collections.abc import Sequence

from decklog.core.entries import Entry


class NotConfigured:
    """Outbox topic ``name``: every row done at once, nothing sent. ``why``: what would configure its sender."""

    batch_size = 256

    def __init__(self, name: str, why: str) -> None:
        self.name = name
        self.why = why
        self.skipped = 0  # entries taken without acting on them

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        self.skipped += len(entries)
