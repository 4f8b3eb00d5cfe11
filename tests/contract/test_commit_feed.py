"""Many replicas, one database: a commit on one replica wakes the others' dispatchers at once (LISTEN/NOTIFY,
core/store/postgres/notify.py), with no poll running — the poll (bot/ops.py) stays only the safety net."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from decklog.core.entries import Entry
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.store.postgres.log_store import PostgresLogStore
from decklog.core.store.postgres.notify import PAYLOAD_MAX, decode, encode
from tests.store_contract import SCOPE, declare, message

TOPICS = ("index", "slack")


class Recording:
    name = "slack"
    batch_size = 8

    def __init__(self) -> None:
        self.seqs: list[int] = []

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        self.seqs.extend(e.seq for e in entries)


async def test_a_commit_by_a_process_without_a_dispatcher_wakes_the_replicas_without_a_poll(pg_url: str) -> None:
    committer, drainer = PostgresLogStore(pg_url, topics=TOPICS), PostgresLogStore(pg_url, topics=TOPICS)
    try:
        sender = Recording()
        dispatcher = Dispatcher(drainer, [sender], cursors=drainer)
        dispatcher.start()  # LISTENs; nobody sweeps, and the committer has no dispatcher at all
        deadline = asyncio.get_running_loop().time() + 30
        await declare(committer)
        for n in range(5):
            await committer.append(SCOPE, [message(f"m{n}")])
        while sender.seqs != [1, 2, 3, 4, 5, 6]:
            assert asyncio.get_running_loop().time() < deadline, (sender.seqs, drainer.feed.received)
            await asyncio.sleep(0.01)
        assert committer.feed.sent >= 1 and drainer.feed.received >= 1
        await dispatcher.stop()
    finally:
        await committer.close()
        await drainer.close()


async def test_every_listener_on_one_store_hears_each_remote_commit(pg_url: str) -> None:
    """Two dispatchers (or any two listeners) on one store share its LISTEN connection; neither is left deaf."""
    committer, listener = PostgresLogStore(pg_url, topics=TOPICS), PostgresLogStore(pg_url, topics=TOPICS)
    heard: dict[str, list[str]] = {"first": [], "second": []}
    try:
        for name in heard:
            listener.on_remote_commit(lambda scope, _topics, _drained, name=name: heard[name].append(scope))
        await asyncio.sleep(0)  # (the LISTEN thread starts on the first registration)
        deadline = asyncio.get_running_loop().time() + 30
        await declare(committer)
        while not (heard["first"] and heard["second"]):
            assert asyncio.get_running_loop().time() < deadline, (heard, listener.feed.received)
            await asyncio.sleep(0.05)
            await committer.append(SCOPE, [message("again")])  # a NOTIFY sent before LISTEN ran is not heard
        assert set(heard["first"]) == set(heard["second"]) == {SCOPE}
    finally:
        await committer.close()
        await listener.close()


def test_payloads_name_every_scope_and_topic_stay_small_and_skip_our_own() -> None:
    pending = {f"incident/s{n:04d}-with-a-long-slug": {"slack", "index"} for n in range(400)}
    payloads = encode("tok", pending)
    assert len(payloads) > 1 and all(len(p.encode()) <= PAYLOAD_MAX for p in payloads)
    seen = [found for p in payloads for found in decode(p, own="other")]
    assert [s for s, _t, _d in seen] == list(pending) and all(t == ("index", "slack") for _s, t, _d in seen)
    assert not any(d for _s, _t, d in seen)  # the committer runs no dispatcher (the CLI)
    assert all(d for _s, _t, d in decode(encode("tok", {"incident/x": {"slack"}}, drains=True)[0], own="z"))
    assert decode(payloads[0], own="tok") == []  # a replica's own commits are not news to it
    assert decode("garbage\nx\ty", own="z") == []
