"""The storage contract: one abstract test suite that every backend's factory must pass (``StorageContract``: the
log store, the index and the inbox it makes; each part's suite is also a class of its own).

A backend's test module subclasses ``StorageContract`` (adding a backend: one package, one factory, one subclass)
and provides the ``make_factory`` fixture: ``make_factory(*, max_open=None) -> StorageFactory``, whose factories
all share ONE storage (so a second one simulates a restart or a second process). ``max_open`` is the backend's
bound on scope resources held open at once (files, connections); ``None`` means the backend's default. The suites
open what they need through the factory and close it at teardown.

Nothing here may reach into a backend's internals: backend-specific checks (pragmas, group-commit counters,
file handles, rows of a table) live in that backend's own module.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest

from decklog.core.changes.facts import change_observation
from decklog.core.clock import ManualClock, iso
from decklog.core.entries import Actor, Entry, NewEntry
from decklog.core.errors import Conflict, InvalidInput, NotFound
from decklog.core.ids import ScopeId
from decklog.core.signals import ChangeSignal
from decklog.core.state import ScopeState, fold_all
from decklog.core.store.memory.log_store import MemoryLogStore
from decklog.core.store.ports import ERROR_MAX, Inbox, IndexPort, LogStore, StorageFactory

OpenStore = Callable[..., Awaitable[LogStore]]
OpenIndex = Callable[[], Awaitable[IndexPort]]
MakeFactory = Callable[..., StorageFactory]
TOPICS = ("index", "slack")

SCOPE = "incident/payments-5xx"
ALICE = Actor.human("U0ALICE", "alice")
BOT = Actor.agent("rules", "rule-based")


def declared(title: str = "Payments 5xx", *, severity: int | None = 2, key: str | None = None) -> NewEntry:
    return NewEntry.make("declared", ALICE, {"title": title, "severity": severity}, idempotency_key=key)


def message(text: str = "looking", *, key: str | None = None, refs: Sequence[int] = ()) -> NewEntry:
    return NewEntry.make("message", ALICE, {"text": text}, idempotency_key=key, refs=tuple(refs))


def observation(fingerprint: str, status: str = "firing", *, key: str | None = None) -> NewEntry:
    payload = {"text": f"alert {fingerprint}", "fingerprint": fingerprint, "alert_status": status, "service": "api"}
    return NewEntry.make("observation", BOT, payload, idempotency_key=key)


async def declare(store: LogStore, scope: str = SCOPE, **kwargs: Any) -> Entry:
    result = await store.append(scope, [declared(**kwargs)], create=True)
    return result.entries[0]


async def read_all(store: LogStore, scope: str = SCOPE) -> list[Entry]:
    return await store.read(scope)


def assert_gapless_chain(entries: Sequence[Entry]) -> None:
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    assert len({e.id for e in entries}) == len(entries)
    prev = ""
    for e in entries:
        assert e.prev_hash == prev, f"entry {e.seq} does not chain to {e.seq - 1}"
        prev = e.hash


def open_fds() -> int:
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("counting open file descriptors needs /proc/self/fd")
    return len(os.listdir("/proc/self/fd"))


class FactoryFixtures:
    """``make_factory``, which a backend's subclass provides."""

    @pytest.fixture
    def make_factory(self) -> MakeFactory:
        raise NotImplementedError("a backend's test module provides make_factory")


class LogStoreContract(FactoryFixtures):
    """The ``LogStore`` a factory makes."""

    @pytest.fixture
    async def open_store(self, make_factory: MakeFactory) -> AsyncIterator[OpenStore]:
        made: list[tuple[StorageFactory, LogStore]] = []

        async def open_store(*, max_open: int | None = None) -> LogStore:
            factory = make_factory(max_open=max_open)
            store = await factory.log_store(topics=TOPICS)
            made.append((factory, store))
            return store

        yield open_store
        for factory, store in made:
            await store.close()
            await factory.close()

    @pytest.fixture
    async def store(self, open_store: OpenStore) -> LogStore:
        return await open_store()

    # -- creating a scope ---------------------------------------------------------------------------------------

    async def test_first_append_must_be_declared(self, store: LogStore) -> None:
        with pytest.raises(NotFound):
            await store.append(SCOPE, [message()], create=True)
        assert await store.scope_ids() == []
        assert not await store.exists(SCOPE)
        with pytest.raises(NotFound):
            await store.read(SCOPE)
        with pytest.raises(NotFound):
            await store.get_state(SCOPE)

    async def test_append_to_unknown_scope_without_create_is_not_found_and_creates_nothing(
        self, store: LogStore
    ) -> None:
        with pytest.raises(NotFound):
            await store.append(SCOPE, [declared()])
        assert await store.scope_ids() == []
        assert not await store.exists(SCOPE)

    @pytest.mark.parametrize(
        ("attempt", "error"),
        [
            pytest.param(
                lambda s: s.append(SCOPE, [declared()], expected_version=3, create=True), Conflict, id="stale-cas"
            ),
            pytest.param(
                lambda s: s.append(SCOPE, [declared(), message(refs=[9])], create=True), InvalidInput, id="bad-ref"
            ),
            pytest.param(
                lambda s: s.append(SCOPE, [declared(), declared()], create=True), Conflict, id="declared-twice"
            ),
            pytest.param(
                lambda s: s.append(SCOPE, lambda state: [message()], create=True), NotFound, id="decide-no-declared"
            ),
            pytest.param(lambda s: s.append(SCOPE, lambda state: [], create=True), NotFound, id="decide-nothing"),
            pytest.param(lambda s: s.append(SCOPE, [], create=True), NotFound, id="empty-request"),
        ],
    )
    async def test_a_failed_first_append_leaves_nothing_behind(
        self, store: LogStore, attempt: Callable[[LogStore], Awaitable[Any]], error: type[Exception]
    ) -> None:
        with pytest.raises(error):
            await attempt(store)
        assert await store.scope_ids() == []
        assert not await store.exists(SCOPE)
        # and the scope can still be declared properly afterwards
        await declare(store)
        assert await store.scope_ids() == [ScopeId.parse(SCOPE)]

    async def test_declaring_twice_is_a_conflict(self, store: LogStore) -> None:
        await declare(store)
        with pytest.raises(Conflict):
            await store.append(SCOPE, [declared("again")], create=True)
        with pytest.raises(Conflict):
            await store.append(SCOPE, [message(), declared("again")])
        assert [e.kind for e in await read_all(store)] == ["declared"]

    async def test_a_malformed_scope_id_is_invalid_input(self, store: LogStore) -> None:
        with pytest.raises(InvalidInput):
            await store.append("no-slash", [declared()], create=True)
        with pytest.raises(InvalidInput):
            await store.append("planet/x", [declared()], create=True)
        assert await store.scope_ids() == []

    # -- sequence, ids, chain --------------------------------------------------------------------------------------

    async def test_seqs_are_gapless_from_one_and_ids_unique(self, store: LogStore) -> None:
        first = await declare(store)
        assert first.seq == 1
        assert first.prev_hash == ""
        for i in range(10):
            result = await store.append(SCOPE, [message(f"m{i}"), message(f"n{i}")])
            assert [e.seq for e in result.entries] == [2 + 2 * i, 3 + 2 * i]
        await asyncio.gather(*(store.append(SCOPE, [message(f"c{i}")]) for i in range(40)))
        entries = await read_all(store)
        assert len(entries) == 61
        assert_gapless_chain(entries)
        assert (await store.get_state(SCOPE)).version == 61

    async def test_entry_times_never_go_backwards(self, store: LogStore) -> None:
        await declare(store)
        await asyncio.gather(*(store.append(SCOPE, [message(f"c{i}")]) for i in range(30)))
        times = [e.at for e in await read_all(store)]
        assert times == sorted(times)
        assert all(t.utcoffset() is not None and t.utcoffset().total_seconds() == 0 for t in times)  # type: ignore[union-attr]

    async def test_append_result_carries_the_stored_entries_and_state(self, store: LogStore) -> None:
        await declare(store)
        result = await store.append(SCOPE, [message("a"), observation("fp1")])
        assert not result.duplicate
        assert result.last_seq == 3
        assert result.state.version == 3
        assert "fp1" in result.state.alerts
        stored = await store.read_seqs(SCOPE, [2, 3])
        assert [e.model_dump() for e in stored] == [e.model_dump() for e in result.entries]

    # -- idempotency ------------------------------------------------------------------------------------------------

    async def test_request_key_returns_the_originals_and_appends_nothing(self, store: LogStore) -> None:
        await declare(store)
        first = await store.append(SCOPE, [message("a"), message("b")], idempotency_key="slack:Ev1")
        again = await store.append(SCOPE, [message("other")], idempotency_key="slack:Ev1")
        assert not first.duplicate
        assert again.duplicate
        assert [e.id for e in again.entries] == [e.id for e in first.entries]
        assert [e.seq for e in again.entries] == [2, 3]
        assert again.state.version == 3
        assert len(await read_all(store)) == 3

    async def test_request_key_dedupes_a_decide_request_without_calling_it_again(self, store: LogStore) -> None:
        await declare(store)
        calls: list[int] = []

        def decide(state: ScopeState) -> list[NewEntry]:
            calls.append(state.version)
            return [message(f"at {state.version}")]

        first = await store.append(SCOPE, decide, idempotency_key="turn-7")
        again = await store.append(SCOPE, decide, idempotency_key="turn-7")
        assert again.duplicate
        assert [e.id for e in again.entries] == [e.id for e in first.entries]
        assert calls == [1]

    async def test_request_key_on_the_declaring_append(self, store: LogStore) -> None:
        first = await store.append(SCOPE, [declared()], create=True, idempotency_key="alert:fp1:firing")
        again = await store.append(SCOPE, [declared()], create=True, idempotency_key="alert:fp1:firing")
        assert again.duplicate
        assert again.entries[0].id == first.entries[0].id
        assert len(await read_all(store)) == 1

    async def test_entry_keys_are_unique_and_a_repeat_makes_the_request_a_duplicate(self, store: LogStore) -> None:
        await declare(store)
        first = await store.append(SCOPE, [observation("fp1", key="am:fp1:firing")])
        again = await store.append(SCOPE, [observation("fp1", key="am:fp1:firing")])
        assert again.duplicate
        assert again.entries[0].id == first.entries[0].id
        other = await store.append(SCOPE, [observation("fp1", "resolved", key="am:fp1:resolved")])
        assert not other.duplicate
        keys = [e.idempotency_key for e in await read_all(store) if e.idempotency_key]
        assert keys == ["am:fp1:firing", "am:fp1:resolved"]

    async def test_a_repeated_key_within_one_batch_appends_exactly_once(self, store: LogStore) -> None:
        await declare(store)
        results = await asyncio.gather(
            *(store.append(SCOPE, [message(f"retry {i}")], idempotency_key="slack:Ev9") for i in range(24)),
            *(store.append(SCOPE, [message(f"other {i}")]) for i in range(8)),
        )
        keyed = results[:24]
        assert sum(not r.duplicate for r in keyed) == 1
        assert len({r.entries[0].id for r in keyed}) == 1
        entries = await read_all(store)
        assert [e.idempotency_key for e in entries].count("slack:Ev9") == 1
        assert len(entries) == 1 + 1 + 8
        assert_gapless_chain(entries)

    async def test_a_repeated_entry_key_within_one_batch_appends_exactly_once(self, store: LogStore) -> None:
        await declare(store)
        results = await asyncio.gather(
            *(store.append(SCOPE, [observation("fp1", key="am:fp1:firing")]) for _ in range(16))
        )
        assert sum(not r.duplicate for r in results) == 1
        assert len(await read_all(store)) == 2

    async def test_a_retried_cas_append_is_a_duplicate_not_a_conflict(self, store: LogStore) -> None:
        await declare(store)
        first = await store.append(SCOPE, [message("claim")], expected_version=1, idempotency_key="claim-1")
        # the response was lost; the caller retries the very same request
        again = await store.append(SCOPE, [message("claim")], expected_version=1, idempotency_key="claim-1")
        assert again.duplicate
        assert again.entries[0].id == first.entries[0].id

    async def test_a_request_repeating_a_key_inside_itself_is_invalid_and_harms_no_neighbour(
        self, store: LogStore
    ) -> None:
        await declare(store)
        bad, good = await asyncio.gather(
            store.append(SCOPE, [message("x", key="k1"), message("y", key="k1")]),
            store.append(SCOPE, [message("fine")]),
            return_exceptions=True,
        )
        assert isinstance(bad, InvalidInput)
        assert not isinstance(good, BaseException)
        assert [e.kind for e in await read_all(store)] == ["declared", "message"]

    async def test_a_decide_returning_an_existing_key_is_a_duplicate(self, store: LogStore) -> None:
        await declare(store)
        first = await store.append(SCOPE, [observation("fp1", key="am:fp1:firing")])
        again, neighbour = await asyncio.gather(
            store.append(SCOPE, lambda state: [observation("fp1", key="am:fp1:firing")]),
            store.append(SCOPE, [message("fine")]),
        )
        assert again.duplicate
        assert again.entries[0].id == first.entries[0].id
        assert not neighbour.duplicate
        assert len(await read_all(store)) == 3

    # -- compare-and-set and decide -----------------------------------------------------------------------------------

    async def test_cas_conflicts_when_stale_and_succeeds_when_current(self, store: LogStore) -> None:
        await declare(store)
        await store.append(SCOPE, [message("a")])
        with pytest.raises(Conflict):
            await store.append(SCOPE, [message("stale")], expected_version=1)
        result = await store.append(SCOPE, [message("current")], expected_version=2)
        assert result.entries[0].seq == 3
        assert len(await read_all(store)) == 3

    async def test_racing_cas_appends_exactly_one_wins(self, store: LogStore) -> None:
        await declare(store)
        results = await asyncio.gather(
            *(store.append(SCOPE, [message(f"claim {i}")], expected_version=1) for i in range(20)),
            return_exceptions=True,
        )
        winners = [r for r in results if not isinstance(r, BaseException)]
        assert len(winners) == 1
        assert all(isinstance(r, Conflict) for r in results if isinstance(r, BaseException))
        assert len(await read_all(store)) == 2

    async def test_decide_sees_the_state_including_earlier_requests_of_the_same_batch(self, store: LogStore) -> None:
        await declare(store)

        def decide(state: ScopeState) -> list[NewEntry]:
            return [message(f"after {state.version}")]

        results = await asyncio.gather(*(store.append(SCOPE, decide) for _ in range(32)))
        for r in results:
            entry = r.entries[0]
            assert entry.payload.model_dump()["text"] == f"after {entry.seq - 1}"
            assert r.state.version == entry.seq
        assert_gapless_chain(await read_all(store))

    async def test_decide_may_refuse_with_conflict_and_nothing_is_appended(self, store: LogStore) -> None:
        await declare(store)

        def decide(state: ScopeState) -> list[NewEntry]:
            raise Conflict("already claimed")

        with pytest.raises(Conflict):
            await store.append(SCOPE, decide)
        assert len(await read_all(store)) == 1

    async def test_a_failing_request_does_not_fail_its_neighbours(self, store: LogStore) -> None:
        await declare(store)

        def refuse(state: ScopeState) -> list[NewEntry]:
            raise Conflict("no")

        def invalid(state: ScopeState) -> list[NewEntry]:
            raise InvalidInput("bad field", field="payload.text")

        requests: list[Awaitable[Any]] = []
        for i in range(6):
            requests += [
                store.append(SCOPE, [message(f"good {i}")]),
                store.append(SCOPE, [message("bad ref", refs=[10_000])]),
                store.append(SCOPE, [message("stale")], expected_version=0),
                store.append(SCOPE, refuse),
                store.append(SCOPE, invalid),
                store.append(SCOPE, [message("declares"), declared()]),
            ]
        results = await asyncio.gather(*requests, return_exceptions=True)
        goods = results[0::6]
        assert all(not isinstance(r, BaseException) for r in goods), goods
        for offset, error in [(1, InvalidInput), (2, Conflict), (3, Conflict), (4, InvalidInput), (5, Conflict)]:
            assert all(isinstance(r, error) for r in results[offset::6]), results[offset::6]
        entries = await read_all(store)
        assert sorted(e.payload.model_dump().get("text", "") for e in entries[1:]) == [f"good {i}" for i in range(6)]
        assert_gapless_chain(entries)
        assert (await store.verify(SCOPE)).ok

    async def test_a_buggy_decide_fails_only_its_own_request(self, store: LogStore) -> None:
        await declare(store)

        def buggy(state: ScopeState) -> list[NewEntry]:
            return [message(state.roles["commander"].user_id)]  # KeyError: nobody is commander yet

        results = await asyncio.gather(
            *(store.append(SCOPE, [message(f"good {i}")]) for i in range(4)),
            store.append(SCOPE, buggy),
            *(store.append(SCOPE, [message(f"also good {i}")]) for i in range(4)),
            return_exceptions=True,
        )
        assert isinstance(results[4], KeyError)
        assert all(not isinstance(r, BaseException) for i, r in enumerate(results) if i != 4), results
        assert len(await read_all(store)) == 9

    async def test_refs_must_point_to_earlier_entries(self, store: LogStore) -> None:
        await declare(store)
        await store.append(SCOPE, [message("a")])
        for refs in ([0], [3], [4], [-1], [1, 99]):
            with pytest.raises(InvalidInput):
                await store.append(SCOPE, [message("bad", refs=refs)])
        ok = await store.append(SCOPE, [message("cites", refs=[1, 2]), message("cites the previous", refs=[3])])
        assert [e.refs for e in ok.entries] == [(1, 2), (3,)]
        assert len(await read_all(store)) == 4

    # -- reads --------------------------------------------------------------------------------------------------------

    async def test_read_after_limit_and_kinds(self, store: LogStore) -> None:
        await declare(store)
        for i in range(10):
            await store.append(SCOPE, [message(f"m{i}"), observation(f"fp{i}")])
        everything = await store.read(SCOPE)
        assert [e.seq for e in everything] == list(range(1, 22))
        assert [e.seq for e in await store.read(SCOPE, after=15)] == list(range(16, 22))
        assert [e.seq for e in await store.read(SCOPE, after=3, limit=4)] == [4, 5, 6, 7]
        assert await store.read(SCOPE, after=21) == []
        messages = await store.read(SCOPE, kinds=["message"])
        assert [e.seq for e in messages] == list(range(2, 22, 2))
        limited = await store.read(SCOPE, after=5, limit=2, kinds=["observation", "declared"])
        assert [(e.seq, e.kind) for e in limited] == [(7, "observation"), (9, "observation")]

    async def test_read_last_is_oldest_first(self, store: LogStore) -> None:
        await declare(store)
        for i in range(10):
            await store.append(SCOPE, [message(f"m{i}"), observation(f"fp{i}")])
        assert [e.seq for e in await store.read_last(SCOPE, limit=3)] == [19, 20, 21]
        assert [e.seq for e in await store.read_last(SCOPE, limit=3, kinds=["message"])] == [16, 18, 20]
        assert [e.seq for e in await store.read_last(SCOPE, limit=2, kinds=["declared"])] == [1]
        assert len(await store.read_last(SCOPE, limit=100)) == 21

    async def test_read_seqs(self, store: LogStore) -> None:
        await declare(store)
        await store.append(SCOPE, [message(f"m{i}") for i in range(5)])
        assert [e.seq for e in await store.read_seqs(SCOPE, [5, 2, 99, 2])] == [2, 5]
        assert await store.read_seqs(SCOPE, []) == []

    async def test_read_round_trips_every_field(self, store: LogStore) -> None:
        await declare(store)
        result = await store.append(
            SCOPE,
            [
                NewEntry.make(
                    "observation",
                    BOT,
                    {"text": "p99 up", "labels": {"a": "b"}, "data": {"n": 1, "x": [1, 2]}, "links": ["http://x"]},
                    refs=[1],
                    idempotency_key="k-obs",
                )
            ],
        )
        (read,) = await store.read(SCOPE, after=1)
        assert read.model_dump() == result.entries[0].model_dump()
        assert read.to_json() == result.entries[0].to_json()

    async def test_get_state_equals_the_fold_of_the_log(self, store: LogStore) -> None:
        await declare(store)
        await store.append(SCOPE, [observation("fp1"), observation("fp1"), observation("fp1", "resolved")])
        await store.append(
            SCOPE,
            [
                NewEntry.make("severity_changed", ALICE, {"severity": 1, "previous": 2}),
                NewEntry.make("role_assigned", ALICE, {"role": "commander", "user_id": "U0ALICE"}),
                NewEntry.make("obligation_opened", BOT, {"obligation_id": "ob1", "text": "verify", "params": {"a": 1}}),
                NewEntry.make("status_changed", ALICE, {"status": "mitigated"}),
            ],
        )
        state = await store.get_state(SCOPE)
        assert state == fold_all(SCOPE, await read_all(store))
        assert state.severity == 1 and state.status == "mitigated" and "ob1" in state.obligations
        assert state.alert_repeats == 1

    async def test_reads_of_an_unknown_scope_are_not_found(self, store: LogStore) -> None:
        for call in (
            store.read(SCOPE),
            store.read_last(SCOPE, limit=1),
            store.read_seqs(SCOPE, [1]),
            store.get_state(SCOPE),
            store.verify(SCOPE),
            store.outbox_summary(SCOPE),
        ):
            with pytest.raises(NotFound):
                await call
        assert await store.scope_ids() == []

    # -- outbox ---------------------------------------------------------------------------------------------------

    async def test_every_entry_gets_one_pending_outbox_row_per_topic(self, store: LogStore) -> None:
        assert len(store.topics) >= 2, "the contract needs at least two topics"
        await declare(store)
        await asyncio.gather(*(store.append(SCOPE, [message(f"m{i}")]) for i in range(9)))
        for topic in store.topics:
            pending = await store.outbox_pending(SCOPE, topic)
            assert [item.entry.seq for item in pending] == list(range(1, 11))
            assert all(item.topic == topic and item.attempts == 0 for item in pending)
        assert (await store.outbox_summary(SCOPE)).pending == dict.fromkeys(store.topics, 10)
        assert [i.entry.seq for i in await store.outbox_pending(SCOPE, store.topics[0], limit=3)] == [1, 2, 3]

    async def test_duplicates_add_no_outbox_rows(self, store: LogStore) -> None:
        await declare(store)
        await store.append(SCOPE, [message()], idempotency_key="k")
        await store.append(SCOPE, [message()], idempotency_key="k")
        assert (await store.outbox_summary(SCOPE)).pending == dict.fromkeys(store.topics, 2)

    async def test_outbox_done_removes_rows_from_pending_for_that_topic_only(self, store: LogStore) -> None:
        first, second = store.topics[0], store.topics[1]
        await declare(store)
        await store.append(SCOPE, [message("a"), message("b")])
        await store.outbox_done(SCOPE, first, [1, 2])
        assert [i.entry.seq for i in await store.outbox_pending(SCOPE, first)] == [3]
        assert [i.entry.seq for i in await store.outbox_pending(SCOPE, second)] == [1, 2, 3]
        await store.outbox_done(SCOPE, first, [])
        summary = await store.outbox_summary(SCOPE)
        assert summary.pending[first] == 1 and summary.pending[second] == 3
        assert summary.parked == {}

    async def test_outbox_failed_keeps_the_row_pending_with_its_attempts(self, store: LogStore) -> None:
        topic = store.topics[0]
        await declare(store)
        await store.outbox_failed(SCOPE, topic, 1, attempts=2, next_attempt_at=1234.5, error="HTTP 500")
        (item,) = await store.outbox_pending(SCOPE, topic)
        assert (item.entry.seq, item.attempts, item.next_attempt_at) == (1, 2, 1234.5)
        assert (await store.outbox_summary(SCOPE)).pending[topic] == 1

    async def test_outbox_park_parks_and_appends_a_visible_delivery_failed_entry(self, store: LogStore) -> None:
        topic, other = store.topics[0], store.topics[1]
        await declare(store)
        await store.append(SCOPE, [message("a")])
        await store.outbox_park(SCOPE, topic, 2, attempts=5, error="channel_not_found")
        assert [i.entry.seq for i in await store.outbox_pending(SCOPE, topic)] == [1, 3]
        entries = await read_all(store)
        failed = entries[-1]
        assert failed.kind == "delivery_failed" and failed.seq == 3
        assert failed.payload.model_dump() == {"sender": topic, "seq": 2, "attempts": 5, "error": "channel_not_found"}
        assert failed.refs == (2,)
        summary = await store.outbox_summary(SCOPE)
        assert summary.parked == {topic: 1}
        assert summary.pending == {topic: 2, other: 3}
        (parked,) = await store.outbox_parked(SCOPE)
        assert (parked.topic, parked.seq, parked.kind, parked.attempts) == (topic, 2, "message", 5)
        assert "channel_not_found" in parked.error
        assert (await store.verify(SCOPE)).ok
        assert await store.get_state(SCOPE) == fold_all(SCOPE, entries)

    async def test_parking_a_delivery_failed_entry_appends_no_further_entry(self, store: LogStore) -> None:
        topic = store.topics[0]
        await declare(store)
        await store.outbox_park(SCOPE, topic, 1, attempts=5, error="boom")
        assert [e.kind for e in await read_all(store)] == ["declared", "delivery_failed"]
        await store.outbox_park(SCOPE, topic, 2, attempts=5, error="boom again")
        assert [e.kind for e in await read_all(store)] == ["declared", "delivery_failed"]
        assert (await store.outbox_summary(SCOPE)).parked == {topic: 2}

    async def test_outbox_retry_parked_brings_rows_back(self, store: LogStore) -> None:
        first, second = store.topics[0], store.topics[1]
        await declare(store)
        await store.append(SCOPE, [message("a")])
        await store.outbox_done(SCOPE, second, [1, 2, 3])
        await store.outbox_park(SCOPE, first, 1, attempts=5, error="x")
        await store.outbox_park(SCOPE, second, 2, attempts=5, error="y")
        assert (await store.outbox_summary(SCOPE)).parked == {first: 1, second: 1}
        assert await store.outbox_retry_parked(SCOPE, first) == 1
        pending = await store.outbox_pending(SCOPE, first)
        assert [(i.entry.seq, i.attempts) for i in pending] == [(1, 0), (2, 0), (3, 0), (4, 0)]
        assert (await store.outbox_summary(SCOPE)).parked == {second: 1}
        assert await store.outbox_retry_parked(SCOPE) == 1
        assert (await store.outbox_summary(SCOPE)).parked == {}
        assert await store.outbox_retry_parked(SCOPE) == 0
        assert await store.outbox_parked(SCOPE) == []

    # -- sender memos ----------------------------------------------------------------------------------------------

    async def test_memos_round_trip_and_overwrite(self, store: LogStore) -> None:
        topic = store.topics[0]
        await declare(store)
        assert await store.memo_get(SCOPE, topic, "entry:1") is None
        await store.memo_put(SCOPE, topic, "entry:1", {"ts": "1726.0001", "channel": "C1", "n": [1, 2]})
        assert await store.memo_get(SCOPE, topic, "entry:1") == {"ts": "1726.0001", "channel": "C1", "n": [1, 2]}
        await store.memo_put(SCOPE, topic, "entry:1", {"ts": "1726.0002"})
        assert await store.memo_get(SCOPE, topic, "entry:1") == {"ts": "1726.0002"}
        assert await store.memo_get(SCOPE, store.topics[1], "entry:1") is None
        await store.memo_put(SCOPE, topic, "entry:2", {"ts": "1726.0003"})
        assert await store.memo_all(SCOPE, topic) == {"entry:1": {"ts": "1726.0002"}, "entry:2": {"ts": "1726.0003"}}
        assert await store.memo_all(SCOPE, store.topics[1]) == {}
        assert len(await read_all(store)) == 1  # memos are not entries

    # -- subscribe -------------------------------------------------------------------------------------------------

    async def test_subscribers_hear_each_committed_append_once(self, store: LogStore) -> None:
        heard: list[tuple[str, tuple[int, ...]]] = []
        visible: list[asyncio.Task[list[Entry]]] = []

        def listener(scope: str, entries: tuple[Entry, ...]) -> None:
            heard.append((scope, tuple(e.seq for e in entries)))
            if entries:
                visible.append(asyncio.ensure_future(store.read_seqs(scope, [e.seq for e in entries])))

        store.subscribe(listener)
        await declare(store)
        await store.append(SCOPE, [message("a"), message("b")])
        await store.append(SCOPE, [message("dup")], idempotency_key="k")
        await store.append(SCOPE, [message("dup")], idempotency_key="k")
        with pytest.raises(Conflict):
            await store.append(SCOPE, [message("stale")], expected_version=0)
        entry_batches = [seqs for _, seqs in heard if seqs]
        assert entry_batches == [(1,), (2, 3), (4,)]
        assert all(scope == SCOPE for scope, _ in heard)
        assert [[e.seq for e in await task] for task in visible] == [[1], [2, 3], [4]]

    async def test_a_failing_subscriber_does_not_fail_the_append(self, store: LogStore) -> None:
        heard: list[int] = []

        def broken(scope: str, entries: tuple[Entry, ...]) -> None:
            raise RuntimeError("subscriber bug")

        store.subscribe(broken)
        store.subscribe(lambda scope, entries: heard.extend(e.seq for e in entries))
        await declare(store)
        result = await store.append(SCOPE, [message("a")])
        assert result.entries[0].seq == 2
        assert heard == [1, 2]

    # -- verify, exists, listing -----------------------------------------------------------------------------------

    async def test_verify_is_ok_on_a_good_log(self, store: LogStore) -> None:
        await declare(store)
        await asyncio.gather(*(store.append(SCOPE, [message(f"m{i}"), observation(f"fp{i % 3}")]) for i in range(20)))
        report = await store.verify(SCOPE)
        assert report.ok, report
        assert report.entries == 41
        assert report.first_bad_seq is None

    async def test_exists_and_scope_ids(self, store: LogStore) -> None:
        assert await store.scope_ids() == []
        names = ["incident/b-2", "change/r2026-09-19-4", "incident/a.1"]
        for name in names:
            assert not await store.exists(name) and not store.holds(name)
            await declare(store, name)
            assert await store.exists(name)
            assert await store.exists(ScopeId.parse(name))
            assert store.holds(name) and store.holds(ScopeId.parse(name))
        assert await store.scope_ids() == sorted(ScopeId.parse(n) for n in names)

    # -- durability and resources -----------------------------------------------------------------------------------

    async def test_everything_survives_close_and_reopen(self, open_store: OpenStore) -> None:
        store = await open_store()
        topic = store.topics[0]
        await declare(store)
        await store.append(SCOPE, [message("a"), observation("fp1")], idempotency_key="k")
        await store.outbox_done(SCOPE, topic, [1])
        await store.memo_put(SCOPE, topic, "m", {"v": 1})
        before_entries = [e.model_dump() for e in await read_all(store)]
        before_state = await store.get_state(SCOPE)
        await store.close()

        reopened = await open_store()
        assert [e.model_dump() for e in await read_all(reopened)] == before_entries
        assert await reopened.get_state(SCOPE) == before_state
        assert [i.entry.seq for i in await reopened.outbox_pending(SCOPE, topic)] == [2, 3]
        assert await reopened.memo_get(SCOPE, topic, "m") == {"v": 1}
        assert (await reopened.append(SCOPE, [message("x")], idempotency_key="k")).duplicate
        result = await reopened.append(SCOPE, [message("after restart")], expected_version=3)
        assert result.entries[0].seq == 4
        assert_gapless_chain(await read_all(reopened))
        assert (await reopened.verify(SCOPE)).ok
        assert await reopened.scope_ids() == [ScopeId.parse(SCOPE)]

    async def test_two_stores_on_one_storage_append_to_one_scope_without_losing_entries(
        self, open_store: OpenStore
    ) -> None:
        one, two = await open_store(), await open_store()
        await declare(one)

        async def producer(store: LogStore, name: str) -> None:
            for i in range(25):
                await store.append(SCOPE, [message(f"{name}{i}")])

        await asyncio.gather(*(producer(s, f"{n}-{k}-") for n, s in (("one", one), ("two", two)) for k in range(4)))
        entries = await read_all(one)
        assert len(entries) == 1 + 2 * 4 * 25
        assert_gapless_chain(entries)
        assert (await two.verify(SCOPE)).ok
        assert await one.get_state(SCOPE) == await two.get_state(SCOPE) == fold_all(SCOPE, entries)

    async def test_open_file_descriptors_stay_bounded_over_many_scopes(self, open_store: OpenStore) -> None:
        store = await open_store(max_open=8)
        await declare(store, "incident/warm-up")
        baseline = open_fds()
        peak = baseline
        for i in range(40):
            await declare(store, f"incident/s{i}")
            await store.append(f"incident/s{i}", [message("m")])
            peak = max(peak, open_fds())
        sem = asyncio.Semaphore(24)  # more concurrent users than open slots

        async def touch(i: int) -> None:
            nonlocal peak
            async with sem:
                scope = f"incident/c{i}"
                await declare(store, scope)
                await store.read(scope)
                peak = max(peak, open_fds())

        await asyncio.gather(*(touch(i) for i in range(40)))
        assert len(await store.scope_ids()) == 81
        # about three descriptors per open SQLite scope (db, -wal, -shm); 80 scopes unbounded would be ~240
        assert peak - baseline <= 6 * 8 + 8, (baseline, peak)  # a writer and a reader connection per open file


# -- the index ----------------------------------------------------------------------------------------------------------


async def feed(index: IndexPort, log: MemoryLogStore, scope: str) -> None:
    await index.apply(await log.get_state(scope), await log.read(scope))


async def declare_scope(log: MemoryLogStore, scope: str, title: str, *, key: str | None = None, **extra: Any) -> None:
    payload = {"title": title, "severity": 2, **extra}
    await log.append(scope, [NewEntry.make("declared", ALICE, payload)], create=True, idempotency_key=key)


def msg(text: str, **extra: Any) -> NewEntry:
    return NewEntry.make("message", ALICE, {"text": text, **extra})


def obs(fingerprint: str, status: str = "firing", service: str = "api") -> NewEntry:
    payload = {"text": f"alert {fingerprint}", "fingerprint": fingerprint, "alert_status": status, "service": service}
    return NewEntry.make("observation", Actor.system("alerts"), payload)


class IndexContract(FactoryFixtures):
    """The ``IndexPort`` a factory makes. Entries and states come from a real log (the in-memory backend); each test
    feeds them to the index the way ``IndexSender`` does (``apply``) and checks listing, routing, fingerprints,
    inbound dedup, subscriptions, search, rebuild, counts and milestones."""

    @pytest.fixture
    async def open_index(self, make_factory: MakeFactory) -> AsyncIterator[OpenIndex]:
        """``open_index()`` → an index; every index it makes shares one storage (a second one is another replica)."""
        made: list[tuple[StorageFactory, LogStore, IndexPort]] = []

        async def open_index() -> IndexPort:
            factory = make_factory()
            store = await factory.log_store()  # the index of a backend runs on its store's connections
            index = await factory.index()
            made.append((factory, store, index))
            return index

        yield open_index
        for factory, store, index in made:
            await index.close()
            await store.close()
            await factory.close()

    @pytest.fixture
    async def index(self, open_index: OpenIndex) -> IndexPort:
        return await open_index()

    async def test_updated_since_lists_every_scope_touched_since_a_time_however_old_or_many(
        self, index: IndexPort
    ) -> None:
        """The lifecycle job and the periodic sweep find their scopes by ``updated_since`` with no cap, so an incident
        declared long ago and touched now is found among any number of newer ones."""
        clock = ManualClock()
        log = MemoryLogStore(clock=clock)
        await declare_scope(log, "incident/old", "Declared first")
        clock.advance(hours=1)
        for i in range(5):
            await declare_scope(log, f"incident/new-{i}", f"Newer {i}")
        since = iso(clock.advance(minutes=10))
        await log.append("incident/old", [msg("still here")])  # the oldest, touched after ``since``
        for scope in ["incident/old"] + [f"incident/new-{i}" for i in range(5)]:
            await feed(index, log, scope)
        assert [r.id for r in await index.list_scopes(updated_since=since, limit=None)] == ["incident/old"]
        assert len(await index.list_scopes(limit=None)) == 6
        assert [r.id for r in await index.list_scopes(limit=2)] == ["incident/new-0", "incident/new-1"]

    async def test_reservations_never_reuse_an_id(self, index: IndexPort) -> None:
        first = await index.reserve_scope("incident", "db-down", exact=False)
        second = await index.reserve_scope("incident", "db-down", exact=False)
        third = await index.reserve_scope("incident", "db-down", exact=False, on_disk=lambda s: s.endswith("-3"))
        assert [str(first), str(second), str(third)] == ["incident/db-down", "incident/db-down-2", "incident/db-down-4"]
        with pytest.raises(Conflict):
            await index.reserve_scope("incident", "db-down", exact=True)
        assert await index.list_scopes() == []  # reserved only: not listed
        assert await index.counts() == {"reserved": 3}

    async def test_an_inbound_key_reserves_once(self, index: IndexPort) -> None:
        one = await index.reserve_scope("incident", "x", exact=False, inbound_key="slack:Ev1")
        again = await index.reserve_scope("incident", "x", exact=False, inbound_key="slack:Ev1")
        assert one == again
        assert await index.inbound_scope("slack:Ev1") == str(one)
        assert await index.inbound_scope("slack:Ev2") is None

    async def test_racing_replicas_reserve_distinct_ids(self, open_index: OpenIndex) -> None:
        one, two = await open_index(), await open_index()
        got = await asyncio.gather(*(ix.reserve_scope("incident", "race", exact=False) for ix in (one, two) * 4))
        assert len({str(s) for s in got}) == 8

    async def test_apply_lists_scopes_with_filters(self, index: IndexPort) -> None:
        log = MemoryLogStore()
        await declare_scope(log, "incident/a", "Payments 5xx")
        await log.append("incident/a", [obs("fp1", service="payments")])
        await declare_scope(log, "incident/b", "Search slow")
        await log.append("incident/b", [NewEntry.make("status_changed", ALICE, {"status": "resolved"})])
        for scope in ("incident/a", "incident/b"):
            await feed(index, log, scope)
        rows = {r.id: r for r in await index.list_scopes()}
        assert set(rows) == {"incident/a", "incident/b"}
        assert rows["incident/a"].title == "Payments 5xx" and rows["incident/a"].is_open
        assert [r.id for r in await index.list_scopes(open_only=True)] == ["incident/a"]
        assert [r.id for r in await index.list_scopes(status="resolved")] == ["incident/b"]
        assert [r.id for r in await index.list_scopes(text="PAYMENTS")] == ["incident/a"]
        assert [r.id for r in await index.list_scopes(service="payments")] == ["incident/a"]
        assert await index.list_scopes(kind="change") == []
        got = await index.get("incident/a")
        assert got is not None and got.version == 2 and got.to_json()["id"] == "incident/a"
        assert await index.get("incident/zzz") is None
        assert await index.unresolved_incidents() == ["incident/a"]
        open_status = (await log.get_state("incident/a")).status
        assert await index.counts() == {open_status: 1, "resolved": 1}

    async def test_apply_is_idempotent_by_seq(self, index: IndexPort) -> None:
        log = MemoryLogStore()
        await declare_scope(log, "incident/a", "Cache stampede")
        await log.append("incident/a", [msg("restarting the cache nodes")])
        for _ in range(3):
            await feed(index, log, "incident/a")
        assert await index.position("incident/a") == 2
        hits = await index.search("cache nodes")  # the declaration's title says "cache" too
        assert sorted((h.scope, h.seq) for h in hits) == [("incident/a", 1), ("incident/a", 2)]

    async def test_routes_threads_and_channels(self, index: IndexPort) -> None:
        log = MemoryLogStore()
        await declare_scope(log, "incident/a", "A")
        await log.append("incident/a", [NewEntry.make("thread_linked", Actor.system(), {"channel": "C1", "ts": "1.5"})])
        await declare_scope(log, "incident/b", "B")
        link = {"channel": "C2", "dedicated_channel": True, "ts": "2.5"}
        await log.append("incident/b", [NewEntry.make("thread_linked", Actor.system(), link)])
        for scope in ("incident/a", "incident/b"):
            await feed(index, log, scope)
        assert await index.route("C1", "1.5") == "incident/a"
        assert await index.route("C1", "9.9") is None
        assert await index.route("C2", "7.7") == "incident/b"  # a dedicated channel routes every thread
        await index.add_route("slack:C3", "incident/a")
        assert await index.route("C3") == "incident/a"
        await index.add_route("slack:C3", "incident/b")
        assert await index.route("C3") == "incident/b"
        row = await index.get("incident/a")
        assert row is not None and (row.thread_channel, row.thread_ts) == ("C1", "1.5")

    async def test_fingerprints_route_to_the_open_scope(self, index: IndexPort) -> None:
        log = MemoryLogStore()
        await declare_scope(log, "incident/a", "A")
        await log.append("incident/a", [obs("fp1")])
        await feed(index, log, "incident/a")
        assert await index.open_scope_for_fingerprint("fp1") == "incident/a"
        await log.append("incident/a", [NewEntry.make("status_changed", ALICE, {"status": "resolved"})])
        await feed(index, log, "incident/a")
        assert await index.open_scope_for_fingerprint("fp1") is None
        await index.reserve_scope("incident", "b", exact=True)
        await index.claim_fingerprint("fp1", "incident/b", "api")
        assert await index.open_scope_for_fingerprint("fp1") == "incident/b"  # reserved counts as open
        assert await index.open_scope_for_fingerprint("fp2") is None

    async def test_subscriptions(self, index: IndexPort) -> None:
        await index.subscribe("incident/a", "agents", 3)
        await index.subscribe("incident/a", "actions")
        assert await index.subscribers("incident/a") == {"agents": 3, "actions": 0}
        assert await index.position("incident/a", "agents") == 3
        await index.subscribe("incident/a", "agents", 1)  # subscribe sets, it does not only move forward
        assert await index.position("incident/a", "agents") == 1
        assert await index.subscribers("incident/zzz") == {}

    async def test_search_ranks_snippets_and_excludes(self, index: IndexPort) -> None:
        log = MemoryLogStore()
        await declare_scope(log, "incident/a", "A")
        await log.append("incident/a", [msg("the payments database failed over to the replica"), msg("unrelated")])
        await declare_scope(log, "incident/b", "B")
        await log.append("incident/b", [msg("payments were slow, payments recovered"), obs("fp9", service="ledger")])
        for scope in ("incident/a", "incident/b"):
            await feed(index, log, scope)
        hits = await index.search("payments")
        assert {(h.scope, h.seq) for h in hits} == {("incident/a", 2), ("incident/b", 2)}
        assert all("[payments]" in h.snippet.lower() for h in hits), hits
        assert [h.rank for h in hits] == sorted(h.rank for h in hits)  # best first, lower rank is better
        assert [(h.scope, h.kind) for h in await index.search("ledger")] == [("incident/b", "observation")]
        assert [h.scope for h in await index.search("payments", exclude_scope="incident/a")] == ["incident/b"]
        assert await index.search("payments", limit=1) != []
        assert len(await index.search("payments", limit=1)) == 1
        assert await index.search("'; DROP TABLE x --") == []
        assert await index.search("") == []
        assert await index.search("nothing-matches-this") == []

    async def test_changes_on_services(self, index: IndexPort) -> None:
        log = MemoryLogStore()
        await declare_scope(log, "change/r1", "Deploy api", services=["api"])
        await feed(index, log, "change/r1")
        row = await index.get("change/r1")
        assert row is not None
        at = (await log.read("change/r1"))[0].at
        found = await index.changes_on(["api", "web"], at - timedelta(minutes=5))
        assert [(r.id, when) for r, when in found] == [("change/r1", at)]
        assert await index.changes_on(["web"], at - timedelta(minutes=5)) == []
        assert await index.changes_on(["api"], at + timedelta(minutes=5)) == []

    async def test_a_change_is_dated_by_its_own_time_not_by_when_it_was_recorded(self, index: IndexPort) -> None:
        """A deploy its sender reports as a day old, recorded now, is a day old: it is not among the changes of
        the last hours (the investigator would put it just before whatever fires next), and a later status of
        the same change (recorded later still) does not move it. Without a reported time, the recording time."""
        log = MemoryLogStore()
        now = await log.append("change/probe", [NewEntry.make("declared", ALICE, {"title": "t"})], create=True)
        recorded = now.entries[0].at
        day_ago = recorded - timedelta(days=1)
        started = ChangeSignal(source="deployer", change_id="r-old", service="api", status="started", at=day_ago)
        done = started.model_copy(update={"status": "succeeded", "at": day_ago + timedelta(minutes=4)})
        await log.append(
            "change/r-old",
            [
                NewEntry.make("declared", ALICE, {"title": "api r-old", "services": ["api"], "via": "change"}),
                NewEntry.make("observation", Actor.system("deployer"), change_observation(started)),
            ],
            create=True,
        )
        await feed(index, log, "change/r-old")
        await log.append(
            "change/r-old", [NewEntry.make("observation", Actor.system("deployer"), change_observation(done))]
        )
        await feed(index, log, "change/r-old")
        unreported = ChangeSignal(source="deployer", change_id="r-new", service="api")
        await log.append(
            "change/r-new",
            [
                NewEntry.make("declared", ALICE, {"title": "api r-new", "services": ["api"], "via": "change"}),
                NewEntry.make("observation", Actor.system("deployer"), change_observation(unreported)),
            ],
            create=True,
        )
        await feed(index, log, "change/r-new")
        new_at = (await log.read("change/r-new"))[-1].at
        hour = timedelta(hours=1)
        assert [(r.id, at) for r, at in await index.changes_on(["api"], recorded - hour)] == [("change/r-new", new_at)]
        expected = [("change/r-new", new_at), ("change/r-old", day_ago)]
        assert [(r.id, at) for r, at in await index.changes_on(["api"], day_ago - hour)] == expected
        row = await index.get("change/r-old")
        assert row is not None and row.changed_at == iso(day_ago) and row.created_at >= iso(recorded)
        items = [(await log.get_state(s), await log.read(s)) for s in ("change/r-old", "change/r-new")]
        await index.rebuild(items)  # `decklog reindex` derives the same
        assert [(r.id, at) for r, at in await index.changes_on(["api"], day_ago - hour)] == expected
        assert await index.changes_on(["api"], day_ago - hour, recorded - hour) == [(row, day_ago)]

    async def test_rebuild_replaces_everything(self, index: IndexPort) -> None:
        log = MemoryLogStore()
        await declare_scope(log, "incident/a", "A", key="slack:Ev7")
        await log.append("incident/a", [msg("disk full on node-3")])
        await index.reserve_scope("incident", "stale", exact=True)
        await index.add_route("slack:C9", "incident/stale")
        await index.rebuild([(await log.get_state("incident/a"), await log.read("incident/a"))])
        assert [r.id for r in await index.list_scopes()] == ["incident/a"]
        assert await index.route("C9") is None
        assert await index.counts() == {(await log.get_state("incident/a")).status: 1}
        assert await index.inbound_scope("slack:Ev7") == "incident/a"
        assert [h.seq for h in await index.search("disk")] == [2]
        assert await index.position("incident/a") == 2

    async def test_a_batch_of_repeats_keeps_the_last_observation_of_each_fingerprint(self, index: IndexPort) -> None:
        """One apply of many observations (an alert storm's batch): each fingerprint routes to its scope (the rows
        themselves: tests/contract/test_index_rows.py), and a milestones row written once stays right when later
        applies skip rewriting it."""
        log = MemoryLogStore()
        await declare_scope(log, "incident/storm", "Storm")
        await log.append("incident/storm", [obs("fp1"), obs("fp2", service="db"), obs("fp1"), obs("fp1", "resolved")])
        await feed(index, log, "incident/storm")
        await log.append("incident/storm", [obs("fp2", "resolved", service="db"), obs("fp2", service="db")])
        await feed(index, log, "incident/storm")
        for fp in ("fp1", "fp2"):
            assert await index.open_scope_for_fingerprint(fp) == await index.last_scope_for_fingerprint(fp)
            assert await index.last_scope_for_fingerprint(fp) == "incident/storm"
        [row] = await index.milestones(None)
        assert row.status == (await log.get_state("incident/storm")).status != "resolved"
        await log.append("incident/storm", [NewEntry.make("status_changed", ALICE, {"status": "resolved"})])
        await feed(index, log, "incident/storm")
        [row] = await index.milestones(None)
        assert row.status == "resolved" and row.ttr is not None

    async def test_a_fork_never_routes_and_is_never_an_open_incident(self, index: IndexPort) -> None:
        """A fork copies its source's thread, messages and alerts; applied after the source (the CLI's fork)
        or before it (a rebuild in any order), it takes none of the source's routes or fingerprints, and it is listed
        but never offered as an open incident."""
        from decklog.core.fork import copies

        log = MemoryLogStore()
        await declare_scope(log, "incident/a", "A", services=["api"])
        link = NewEntry.make("thread_linked", Actor.system(), {"channel": "C1", "ts": "1.5"})
        await log.append("incident/a", [link, msg("a reply", channel="C1", ts="1.6"), obs("fp1")])
        source = await log.read("incident/a")
        await log.append("incident/a-fork-1", copies(list(source), "incident/a", len(source)), create=True)
        items = [(await log.get_state(s), await log.read(s)) for s in ("incident/a-fork-1", "incident/a")]
        for rebuild in (False, True):
            if rebuild:
                await index.rebuild(items)
            else:
                for scope in ("incident/a", "incident/a-fork-1"):
                    await feed(index, log, scope)
            assert await index.route("C1", "1.5") == "incident/a"
            assert await index.route("C1", "1.6") == "incident/a"
            assert await index.open_scope_for_fingerprint("fp1") == "incident/a"
            assert await index.last_scope_for_fingerprint("fp1") == "incident/a"
            assert [r.id for r in await index.list_scopes(open_only=True)] == ["incident/a"]
            assert [r.id for r in await index.list_scopes(kind="incident", service="api", open_only=True)] == [
                "incident/a"
            ]
            assert await index.unresolved_incidents() == ["incident/a"]
            fork = await index.get("incident/a-fork-1")
            assert fork is not None and fork.forked_from == "incident/a" and not fork.is_open
            assert sorted(r.id for r in await index.list_scopes()) == ["incident/a", "incident/a-fork-1"]


# -- the inbox ----------------------------------------------------------------------------------------------------------

BODY = {"type": "event_callback", "event_id": "Ev1", "event": {"type": "message"}}


class InboxContract(FactoryFixtures):
    """The ``Inbox`` a factory makes: stored once per key, pending oldest first, done, pruned, and parked after its
    attempts with its error, never pending again until ``retry_parked`` queues it again."""

    @pytest.fixture
    async def inbox(self, make_factory: MakeFactory) -> AsyncIterator[Inbox]:
        factory = make_factory()
        store = await factory.log_store()
        made = await factory.inbox()
        yield made
        await made.close()
        await store.close()
        await factory.close()

    async def test_put_once_pending_oldest_first_done_and_pruned(self, inbox: Inbox) -> None:
        for n in range(3):
            assert await inbox.put(key=f"k{n}", source="http", body={**BODY, "n": n}, meta={"retry_num": "0"})
        assert not await inbox.put(key="k1", source="http", body=BODY, meta={})
        assert [(i.key, i.body["n"], i.attempts) for i in await inbox.pending()] == [
            ("k0", 0, 0),
            ("k1", 1, 0),
            ("k2", 2, 0),
        ]
        assert await inbox.attempt(key="k1") == 1 and await inbox.attempt(key="k1") == 2
        await inbox.done(key="k0")
        assert [i.key for i in await inbox.pending()] == ["k1", "k2"] and await inbox.pending_count() == 2
        assert not await inbox.put(key="k0", source="http", body=BODY, meta={})  # a done key still refuses retries
        assert await inbox.prune(older_than_s=-1) == 1
        assert await inbox.put(key="k0", source="http", body=BODY, meta={})

    async def test_a_parked_request_is_kept_with_its_error_and_never_pending_until_retried(self, inbox: Inbox) -> None:
        for key in ("poison", "fine"):
            assert await inbox.put(key=key, source="http", body={**BODY, "key": key}, meta={})
        await inbox.park(key="poison", error="TypeError: " + "x" * (2 * ERROR_MAX), attempts=3)
        assert [i.key for i in await inbox.pending()] == ["fine"]
        assert (await inbox.pending_count(), await inbox.parked_count()) == (1, 1)
        (parked,) = await inbox.parked()
        assert (parked.key, parked.source, parked.body["key"], parked.attempts) == ("poison", "http", "poison", 3)
        assert parked.error.startswith("TypeError: x") and len(parked.error) == ERROR_MAX
        assert parked.parked_at >= parked.received_at > 0
        assert not await inbox.put(key="poison", source="http", body=BODY, meta={})  # a retry of it is refused
        assert await inbox.prune(older_than_s=-1) == 0  # kept: it is the record of what was given up
        await inbox.done(key="fine")
        await inbox.park(key="fine", error="too late", attempts=1)  # a done request is not parked
        assert await inbox.parked_count() == 1

        assert await inbox.retry_parked() == 1
        assert [(i.key, i.attempts) for i in await inbox.pending()] == [("poison", 0)]
        assert await inbox.parked() == [] and await inbox.retry_parked() == 0
        await inbox.done(key="poison")
        assert await inbox.pending() == [] and await inbox.parked() == []


class StorageContract(LogStoreContract, IndexContract, InboxContract):
    """Every part a backend's factory makes: subclass it once per backend and provide ``make_factory``."""
