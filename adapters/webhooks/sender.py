"""The ``webhooks`` outbox sender: every committed entry, in seq order per scope, to each ``[[webhooks]]``
endpoint that wants its kind, signed as the Standard Webhooks specification says.

A delivery is ``POST <url>`` with the JSON body ``{"type": "entry.<kind>", "timestamp", "data": <the entry as
timeline --json prints it>}`` and the headers ``webhook-id`` (the entry's id: the same on every retry, so a
receiver drops what it has seen), ``webhook-timestamp`` (seconds) and ``webhook-signature`` (``v1,`` base64 of
HMAC-SHA256 over ``id.timestamp.body``, made by the reference library ``standardwebhooks``).

At least once, in order: the dispatcher calls ``deliver`` with a scope's pending entries in seq order and marks them
done only when it returns; any answer but a 2xx (or no answer) raises, so the batch is retried with backoff and,
after the limit, parked with a ``delivery_failed`` entry (``decklog doctor`` lists it, ``--retry`` resumes).
Each endpoint's progress per scope is a sender memo (the last seq it took), so a retry after one endpoint failed
does not post again to those that took the entries. A 429 with ``Retry-After`` waits without spending the failure
budget. A URL outside the egress allowlist parks at once: nothing is sent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiohttp
from standardwebhooks.webhooks import Webhook

from decklog.core.clock import Clock
from decklog.core.egress import EgressPolicy, check
from decklog.core.entries import Entry
from decklog.core.outbox.sender import PermanentFailure, RetryAfter
from decklog.core.store.ports import DeliveryStore

log = logging.getLogger(__name__)
TOPIC = "webhooks"
USER_AGENT = "decklog-webhooks/1"


@dataclass(frozen=True)
class Endpoint:
    """One configured endpoint: ``key`` names its progress memo; ``kinds`` empty = every kind."""

    key: str
    url: str
    secret: str
    kinds: frozenset[str] = frozenset()
    timeout_s: float = 10.0

    def wants(self, kind: str) -> bool:
        return not self.kinds or kind in self.kinds


def body_of(entry: Entry) -> bytes:
    data: dict[str, Any] = {"type": f"entry.{entry.kind}", "timestamp": entry.to_json()["at"], "data": entry.to_json()}
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class WebhooksSender:
    name = TOPIC
    batch_size = 50

    def __init__(
        self,
        store: DeliveryStore,
        endpoints: Sequence[Endpoint],
        http: aiohttp.ClientSession,
        egress: EgressPolicy,
        clock: Clock,
    ) -> None:
        self.store = store
        self.endpoints = tuple(endpoints)
        self.http = http
        self.egress = egress
        self.clock = clock
        self._signers = {e.key: Webhook(e.secret) for e in self.endpoints}

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        for endpoint in self.endpoints:
            memo = await self.store.memo_get(scope, TOPIC, endpoint.key) or {}
            done = int(memo.get("seq", 0))
            todo = [e for e in entries if e.seq > done]
            if not todo:
                continue
            last = done
            try:
                for entry in todo:
                    if endpoint.wants(entry.kind):
                        await self._post(endpoint, entry)
                    last = entry.seq
            finally:
                if last > done:
                    await self.store.memo_put(scope, TOPIC, endpoint.key, {"seq": last})

    async def _post(self, endpoint: Endpoint, entry: Entry) -> None:
        refused = check(self.egress, endpoint.url)
        if refused is not None:
            raise PermanentFailure(f"webhook {endpoint.key}: {refused.reason}")
        body = body_of(entry)
        now: datetime = self.clock.now()
        headers = {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "webhook-id": entry.id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": self._signers[endpoint.key].sign(entry.id, now, body),
        }
        timeout = aiohttp.ClientTimeout(total=endpoint.timeout_s)
        async with self.http.post(endpoint.url, data=body, headers=headers, timeout=timeout) as resp:
            await resp.read()
            if 200 <= resp.status < 300:
                return
            if resp.status == 429:
                raise RetryAfter(_seconds(resp.headers.get("Retry-After")), f"webhook {endpoint.key}: 429")
            raise RuntimeError(f"webhook {endpoint.key}: HTTP {resp.status} for {entry.kind} #{entry.seq}")


def _seconds(value: str | None) -> float:
    try:
        return min(max(float(value or 1), 0.1), 600.0)
    except ValueError:
        return 1.0
