"""Many replicas, one database: Slack's per-channel pace holds across replicas. Each post reserves its channel's
next slot in PostgreSQL (core/store/postgres/pace.py), so posts to one channel from any replica are an interval
apart and never share a slot; a 429 seen by one replica pushes the slot back for all of them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from decklog.adapters.slack.pacing import SharedChannelPacer
from decklog.core.store.postgres.log_store import PostgresLogStore
from decklog.core.store.postgres.pace import PostgresPaceSlots

MINUTE = 60.0  # a long interval: a reservation's wait is k intervals, less the few ms the test took to get there


@pytest.fixture
async def replicas(pg_url: str) -> AsyncIterator[tuple[PostgresPaceSlots, PostgresPaceSlots]]:
    a, b = PostgresLogStore(pg_url, topics=("slack",)), PostgresLogStore(pg_url, topics=("slack",))
    await a.open()
    await b.open()
    yield PostgresPaceSlots(a), PostgresPaceSlots(b)
    await a.close()
    await b.close()


def slots(waits: list[float]) -> list[int]:
    return [round(w / MINUTE) for w in waits]


async def test_posts_to_one_channel_take_successive_slots_whichever_replica_sends(
    replicas: tuple[PostgresPaceSlots, PostgresPaceSlots],
) -> None:
    a, b = replicas
    waits = [await (a if i % 2 else b).reserve("C0INCIDENT", MINUTE) for i in range(6)]
    assert slots(waits) == [0, 1, 2, 3, 4, 5]
    assert slots([await a.reserve("C0OTHER", MINUTE)]) == [0]  # channels are independent


async def test_concurrent_reservations_never_share_a_slot(
    replicas: tuple[PostgresPaceSlots, PostgresPaceSlots],
) -> None:
    a, b = replicas
    waits = await asyncio.gather(*(r.reserve("C0INCIDENT", MINUTE) for r in (a, b) * 5))
    assert sorted(slots(list(waits))) == list(range(10))


async def test_a_rate_limit_seen_by_one_replica_pushes_back_the_others(
    replicas: tuple[PostgresPaceSlots, PostgresPaceSlots],
) -> None:
    a, b = replicas
    assert slots([await a.reserve("C0INCIDENT", MINUTE, floor=2 * MINUTE)]) == [2]  # a got a 429: Retry-After
    assert slots([await b.reserve("C0INCIDENT", MINUTE)]) == [3]


async def test_the_sender_s_pacer_waits_for_its_slot_and_paces_alone_without_the_database(
    replicas: tuple[PostgresPaceSlots, PostgresPaceSlots],
) -> None:
    a, b = replicas
    pa, pb = SharedChannelPacer(a, interval=0.01), SharedChannelPacer(b, interval=0.01)
    await asyncio.gather(*(p.wait("C0INCIDENT") for p in (pa, pb, pa, pb)))

    class Down:
        async def reserve(self, channel: str, interval: float, floor: float = 0.0) -> float:
            raise ConnectionError("database unreachable")

    alone = SharedChannelPacer(Down(), interval=0.01)
    await alone.wait("C0INCIDENT")
    await alone.wait("C0INCIDENT")
    assert alone._next["C0INCIDENT"] > 0  # paced in this process
