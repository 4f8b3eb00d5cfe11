"""The ``changes`` outbox sender: the links a declaration implies, made because it was committed.

Every ``declared`` entry gets a row in the ``changes`` topic (bot.runtime ``TOPIC_KINDS``; other kinds get none).
Delivering it links the new scope to the other side: an incident to the changes on its services in the link window
before its first alert, a change to the open incidents on its service. Because it is an outbox delivery, a crash
between the declaration's commit and the linking only delays the links: the boot sweep delivers the row again.
Links and their evidence carry idempotency (``state.linked`` and ``change-evidence:<change>``), so a redelivery, or
the receiver's own inline link of a change, appends nothing twice.

An incident declared from a split alert notification is linked to its parent in its declaration; the parent's link
back is made at the end of the alert request, or here when that request died first (``core.alerts.splits``).
"""

from __future__ import annotations

from collections.abc import Sequence

from decklog.core.alerts.splits import SplitLinks
from decklog.core.changes.facts import incident_alert_time
from decklog.core.changes.service import ChangeService
from decklog.core.entries import Declared, Entry
from decklog.core.store.ports import LogStore

TOPIC = "changes"
DECLARATION_READ = 8  # the declaration and the entries committed with it (an alert-opened incident's first alert)


class ChangeLinkSender:
    name = TOPIC
    batch_size = 16

    def __init__(self, changes: ChangeService, store: LogStore, *, splits: SplitLinks | None = None) -> None:
        self.changes = changes
        self.store = store
        self.splits = splits
        self.delivered = 0

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        for entry in entries:
            p = entry.payload
            if isinstance(p, Declared) and self.splits is not None and scope.startswith("incident/"):
                await self.splits.back_link(scope)
            if not isinstance(p, Declared) or not any(p.services):
                continue
            if scope.startswith("incident/"):
                first = await self.store.read(scope, limit=DECLARATION_READ)
                batch = [e for e in first if e.at == entry.at] or [entry]  # one transaction shares its time
                await self.changes.incident_opened(scope, p.services, incident_alert_time(batch) or entry.at)
            elif scope.startswith("change/"):
                await self.changes.change_declared(scope)
            self.delivered += 1
