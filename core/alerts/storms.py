"""The alert router's storm bookkeeping: the per-source rate limit, and each source's open alert-storm incident.

Over ``rate_limit_per_minute`` parts a minute from one source — a lone alert, or one group of a notification (one
per service where a notification is split) — a part that would open an incident joins the source's one storm
incident instead (core/alerts/router.py). A group counts once however many alerts it holds: it opens one incident
at most. The limit counts this process's arrivals
(``RateLimiter``), or every replica's with a shared ``RateCounter`` (core/store/ports.py). The storm incident is
remembered here, claimed in the index under ``rules.storm_key(source)`` when it is declared (so that another
replica finds it at once), and found by its title otherwise (one declared before the claim existed, or after
``decklog reindex``). Callers declare under the router's lock on the same key (``rules.storm_key``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from decklog.core.alerts import rules
from decklog.core.alerts.caches import RateLimiter
from decklog.core.store.ports import IndexPort, RateCounter


class Storms:
    def __init__(
        self,
        index: IndexPort,
        limit: int,
        *,
        is_open: Callable[[str], Awaitable[bool]],
        monotonic: Callable[[], float] = time.monotonic,
        rates: RateCounter | None = None,
    ) -> None:
        self.index = index
        self.rate = RateLimiter(limit, monotonic=monotonic)
        self.rates = rates  # several replicas: arrivals counted across them
        self.is_open = is_open  # is this scope an open incident?
        self.incidents: dict[str, str] = {}  # source → its current alert-storm incident

    async def over_limit(self, source: str, n: int) -> list[bool]:
        """Count ``n`` parts from ``source`` (one notification's, in order): is each over its per-minute limit?"""
        if n <= 0:
            return []
        if self.rates is not None:
            total = await self.rates.count(source, n, window=self.rate.window)
            return [total - n + k + 1 > self.rate.limit for k in range(n)]
        return [self.rate.hit(source) for _ in range(n)]

    def seed(self, source: str, scope: str, *, age: float) -> None:
        """At start-up: ``scope`` is ``source``'s storm incident, whose last alert came ``age`` seconds ago."""
        self.incidents[source] = scope
        self.rate.seed(source, age=age)

    async def incident(self, source: str) -> str | None:
        """The source's open alert-storm incident (this process's, else the one claimed in the index, else one whose
        title the index knows), if any."""
        scope = self.incidents.get(source)
        if scope is not None and await self.is_open(scope):
            return scope
        self.incidents.pop(source, None)
        claimed = await self.index.open_scope_for_fingerprint(rules.storm_key(source))  # another replica's, at once
        if claimed is not None and await self.is_open(claimed):
            self.incidents[source] = claimed
            return claimed
        for row in await self.index.list_scopes(kind="incident", open_only=True, text="alert storm", limit=50):
            if rules.is_storm_title(row.title, source) and await self.is_open(row.id):
                self.incidents[source] = row.id
                return row.id
        return None

    async def declared(self, source: str, scope: str) -> None:
        """``scope`` was just declared as ``source``'s storm incident: claimed before the storm lock is released, so
        the next alert over the limit, on any replica, joins it."""
        self.incidents[source] = scope
        await self.index.claim_fingerprint(rules.storm_key(source), scope, "")

    def forget(self, scope: str) -> None:
        for source, storm in list(self.incidents.items()):
            if storm == scope:
                del self.incidents[source]
