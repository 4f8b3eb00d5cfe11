"""The ``LogStore`` contract: one abstract test suite that every log backend must pass.

A backend's test module subclasses ``LogStoreContract`` and provides the ``open_store`` fixture: an async factory
``open_store(*, max_open=None) -> LogStore`` whose stores all share ONE storage (so a second call simulates a
restart or a second process) and which closes every store it made at teardown. ``max_open`` is the backend's
bound on scope resources held open at once (files, connections); ``None`` means the backend's default.

Nothing here may reach into a backend's internals: backend-specific checks (pragmas, group-commit counters,
file handles) live in that backend's own module.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from core.entries import Actor, Entry, NewEntry
from core.errors import Conflict, InvalidInput, NotFound
from core.ids import ScopeId
from core.state import ScopeState, fold_all
from core.store import LogStore

OpenStore = Callable[..., Awaitable[LogStore]]

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


class LogStoreContract:
    """Subclass as ``TestXxxLogStore(LogStoreContract)`` and override the ``open_store`` fixture."""

    @pytest.fixture
    def open_store(self) -> OpenStore:
        raise NotImplementedError("a backend's test module provides open_store")

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
