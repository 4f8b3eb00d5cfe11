"""Property tests of the log store, on every backend's factory that needs no server (SQLite, memory): random
command sequences keep every invariant of the log.

Hypothesis draws a scope's life: a declaration, then groups of requests (a group's requests run concurrently, so
they share group commits) of every kind the fold cares about, with idempotency keys from small pools so that
repeats happen, some compare-and-set, some ``decide`` callables, sometimes through two store instances on one
storage. After the run: the stored state is the fold of the log, ``verify`` passes, seqs are gapless and
chained, no idempotency key appears twice, and exactly the acknowledged entries are in the log.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from decklog.core.entries import INCIDENT_STATUSES, Actor, Entry, NewEntry
from decklog.core.errors import Conflict, InvalidInput
from decklog.core.state import ScopeState, empty_state, fold, fold_all, fold_many
from decklog.core.store.memory.factory import MemoryFactory
from decklog.core.store.memory.log_store import MemoryStorage
from decklog.core.store.ports import AppendResult, LogStore, StorageFactory
from decklog.core.store.sqlite.factory import SqliteFactory

SCOPE = "incident/prop"
BACKENDS = pytest.mark.parametrize("backend", ["sqlite", "memory"])


def factory_maker(backend: str, data_dir: Path) -> Callable[[], StorageFactory]:
    """Factories on one storage of ``backend`` (each call: another process on it, or a restart)."""
    storage = MemoryStorage()
    return (lambda: SqliteFactory(data_dir)) if backend == "sqlite" else (lambda: MemoryFactory(storage))


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- payloads ---------------------------------------------------------------------------------------------------------

ids = {name: st.sampled_from([f"{name}{i}" for i in range(1, 4)]) for name in ("ob", "p", "r", "s", "fp", "U", "C")}
short_text = st.text(max_size=12)
line = st.text(min_size=1, max_size=12)
json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False), short_text
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(short_text, inner, max_size=3),
    max_leaves=6,
)
params = st.dictionaries(st.text(max_size=6), json_value, max_size=3)
fence = st.integers(0, 5)
severity = st.integers(1, 4)

PAYLOADS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "message": st.fixed_dictionaries({"text": short_text}),
    "observation": st.fixed_dictionaries(
        {"text": line},
        optional={
            "fingerprint": st.sampled_from(["", "fp1", "fp2", "fp3"]),
            "alert_status": st.sampled_from(["", "firing", "acknowledged", "resolved"]),
            "service": st.sampled_from(["", "api", "db"]),
            "source": st.sampled_from(["alertmanager", "grafana", "human"]),
            "labels": st.dictionaries(st.text(max_size=5), short_text, max_size=2),
            "data": params,
        },
    ),
    "severity_changed": st.fixed_dictionaries({"severity": severity}, optional={"previous": st.none() | severity}),
    "status_changed": st.fixed_dictionaries({"status": st.sampled_from(INCIDENT_STATUSES)}),
    "role_assigned": st.fixed_dictionaries(
        {"role": st.sampled_from(["commander", "comms", "scribe"]), "user_id": ids["U"]},
        optional={"user_name": short_text},
    ),
    "obligation_opened": st.fixed_dictionaries(
        {"obligation_id": ids["ob"], "text": line},
        optional={
            "purpose": st.sampled_from(["task", "rollback", "verification"]),
            "params": params,
            "conditions": st.lists(short_text, max_size=2),
        },
    ),
    "obligation_claimed": st.fixed_dictionaries(
        {
            "obligation_id": ids["ob"],
            "holder": st.sampled_from(["agent:a", "agent:b", "U1"]),
            "fence": st.integers(1, 5),
            "lease_until": st.just("2026-09-19T03:20:00.000000Z"),
        }
    ),
    "obligation_released": st.fixed_dictionaries({"obligation_id": ids["ob"], "fence": fence}),
    "obligation_fulfilled": st.fixed_dictionaries(
        {"obligation_id": ids["ob"]}, optional={"fence": fence, "note": short_text}
    ),
    "proposal": st.fixed_dictionaries(
        {
            "proposal_id": ids["p"],
            "action": st.sampled_from(["rollback", "restart"]),
            "risk": st.sampled_from(["R1", "R2", "R3", "R4"]),
        },
        optional={
            "params": params,
            "status": st.sampled_from(["waiting_for_approval", "approved", "denied"]),
            "approvals_required": st.integers(1, 2),
        },
    ),
    "approval": st.fixed_dictionaries(
        {"proposal_id": ids["p"], "decision": st.sampled_from(["approved", "denied"]), "approver": ids["U"]}
    ),
    "action_started": st.fixed_dictionaries(
        {"run_id": ids["r"], "action": st.sampled_from(["rollback", "restart"])},
        optional={"proposal_id": st.just("") | ids["p"], "fence": fence, "params": params},
    ),
    "action_result": st.fixed_dictionaries(
        {
            "run_id": ids["r"],
            "outcome": st.sampled_from(["applied", "refused", "uncertain", "not_applied", "abandon_uncertain"]),
        },
        optional={"response": params, "fence": fence},
    ),
    "suggestion": st.fixed_dictionaries({"suggestion_id": ids["s"], "text": line}),
    "suggestion_feedback": st.fixed_dictionaries(
        {"suggestion_id": ids["s"], "verdict": st.sampled_from(["accepted", "dismissed"])}
    ),
    "retracted": st.fixed_dictionaries(  # evidence or a verdict taken back: the fold undoes it
        {"what": st.sampled_from(["evidence", "suggestion_feedback"])},
        optional={"suggestion_id": ids["s"], "text": line, "action": st.sampled_from(["", "resolve"])},
    ),
    "thread_linked": st.fixed_dictionaries(
        {"channel": ids["C"]}, optional={"ts": st.just("1726.0001"), "dedicated_channel": st.booleans()}
    ),
    "scope_linked": st.fixed_dictionaries(
        {"scope": st.sampled_from(["change/r1", "incident/other"])},
        optional={"relation": st.sampled_from(["related", "suspected_cause"])},
    ),
}

actors = st.one_of(
    st.builds(Actor.human, ids["U"]),
    st.builds(Actor.agent, st.sampled_from(["rules", "claude"])),
    st.builds(Actor.system, st.sampled_from(["alerts", "dispatcher"])),
)
ENTRY_KEYS = st.none() | st.sampled_from([f"e{i}" for i in range(6)])
REQUEST_KEYS = st.none() | st.sampled_from([f"r{i}" for i in range(5)])


@st.composite
def new_entries(draw: st.DrawFn) -> NewEntry:
    kind = draw(st.sampled_from(sorted(PAYLOADS)))
    return NewEntry.make(kind, draw(actors), draw(PAYLOADS[kind]), idempotency_key=draw(ENTRY_KEYS))


# -- commands -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    entries: tuple[NewEntry, ...]
    request_key: str | None
    cas: bool  # expected_version = the version seen when the command's group started
    decide: bool  # append through decide(state) instead of a fixed list
    refs_to_previous: bool  # the first entry cites the entry before it
    store: int  # which store instance sends it


@st.composite
def commands(draw: st.DrawFn) -> Command:
    return Command(
        entries=tuple(draw(st.lists(new_entries(), min_size=1, max_size=3))),
        request_key=draw(REQUEST_KEYS),
        cas=draw(st.integers(0, 3)) == 0,
        decide=draw(st.integers(0, 3)) == 0,
        refs_to_previous=draw(st.booleans()),
        store=draw(st.integers(0, 1)),
    )


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[int, list[list[Command]]]:
    stores = draw(st.sampled_from([1, 1, 2]))
    groups = draw(st.lists(st.lists(commands(), min_size=1, max_size=6), min_size=1, max_size=12))
    return stores, groups


def with_refs(entries: tuple[NewEntry, ...], version: int, cite: bool) -> list[NewEntry]:
    if not cite or version < 1:
        return list(entries)
    first = entries[0].model_copy(update={"refs": (version,)})
    return [first, *entries[1:]]


def has_repeated_entry_key(entries: tuple[NewEntry, ...]) -> bool:
    keys = [e.idempotency_key for e in entries if e.idempotency_key]
    return len(keys) != len(set(keys))


async def send(store: LogStore, cmd: Command, seen_version: int) -> AppendResult:
    expected = seen_version if cmd.cas else None
    if cmd.decide:

        def decide(state: ScopeState) -> list[NewEntry]:
            return with_refs(cmd.entries, state.version, cmd.refs_to_previous)

        return await store.append(SCOPE, decide, expected_version=expected, idempotency_key=cmd.request_key)
    entries = with_refs(cmd.entries, seen_version, cmd.refs_to_previous)
    return await store.append(SCOPE, entries, expected_version=expected, idempotency_key=cmd.request_key)


async def run_scenario(make: Callable[[], StorageFactory], stores_wanted: int, groups: list[list[Command]]) -> None:
    stores = [await make().log_store(topics=("index", "slack")) for _ in range(stores_wanted)]
    try:
        declared = await stores[0].append(
            SCOPE, [NewEntry.make("declared", Actor.human("U1"), {"title": "prop", "severity": 3})], create=True
        )
        acknowledged: dict[str, Entry] = {e.id: e for e in declared.entries}
        for group in groups:
            seen = (await stores[0].get_state(SCOPE)).version
            results = await asyncio.gather(
                *(send(stores[c.store % len(stores)], c, seen) for c in group), return_exceptions=True
            )
            duplicates: list[tuple[Command, AppendResult]] = []
            for cmd, result in zip(group, results, strict=True):
                event(f"outcome: {outcome(result)}")
                if isinstance(result, Conflict):
                    assert cmd.cas, f"unexpected conflict: {result}"
                elif isinstance(result, InvalidInput):
                    assert cmd.request_key is None and has_repeated_entry_key(cmd.entries), result
                elif isinstance(result, BaseException):
                    raise AssertionError(f"unexpected error: {result!r}") from result
                elif result.duplicate:
                    duplicates.append((cmd, result))
                else:
                    assert len(result.entries) == len(cmd.entries)
                    for e in result.entries:
                        assert e.id not in acknowledged
                        acknowledged[e.id] = e
            for cmd, result in duplicates:  # after the whole group: the original may be a neighbour's
                assert result.entries, "a duplicate must return the originals"
                assert all(e.id in acknowledged for e in result.entries), "a duplicate returned unknown entries"
                if cmd.request_key:
                    wanted = cmd.request_key
                    for e in result.entries:
                        key = e.idempotency_key or ""
                        assert key == wanted or key.startswith(wanted + "#"), (key, wanted)
                else:
                    own_keys = {e.idempotency_key for e in cmd.entries if e.idempotency_key}
                    assert all(e.idempotency_key in own_keys for e in result.entries)

        event(f"entries in the log: {len(acknowledged) // 10 * 10}+")
        for store in stores:
            await check_invariants(store, acknowledged)
        await stores[0].close()
        reopened = await make().log_store(topics=("index", "slack"))
        stores.append(reopened)
        await check_invariants(reopened, acknowledged)
    finally:
        for store in stores:
            await store.close()


def outcome(result: AppendResult | BaseException) -> str:
    if isinstance(result, BaseException):
        return type(result).__name__
    return "duplicate" if result.duplicate else "appended"


async def check_invariants(store: LogStore, acknowledged: dict[str, Entry]) -> None:
    log = await store.read(SCOPE)
    assert [e.seq for e in log] == list(range(1, len(log) + 1)), "seqs are not gapless from 1"
    prev = ""
    for e in log:
        assert e.prev_hash == prev
        prev = e.hash
    assert {e.id for e in log} == set(acknowledged), "the log and the acknowledged appends differ"
    for e in log:
        assert acknowledged[e.id].model_dump() == e.model_dump()
    keys = [e.idempotency_key for e in log if e.idempotency_key]
    assert len(keys) == len(set(keys)), "an idempotency key appears twice"
    state = await store.get_state(SCOPE)
    assert state == fold_all(SCOPE, log)
    assert state.to_json() == fold_all(SCOPE, log).to_json()
    report = await store.verify(SCOPE)
    assert report.ok, report
    for topic in store.topics:
        assert [i.entry.seq for i in await store.outbox_pending(SCOPE, topic, limit=10_000)] == [e.seq for e in log]


@BACKENDS
@SETTINGS
@given(scenario=scenarios())
def test_random_command_sequences_keep_the_log_invariants(
    backend: str, scenario: tuple[int, list[list[Command]]]
) -> None:
    stores, groups = scenario
    with tempfile.TemporaryDirectory(prefix="decklog-prop-") as tmp:
        asyncio.run(run_scenario(factory_maker(backend, Path(tmp)), stores, groups))


@BACKENDS
@SETTINGS
@given(entries=st.lists(new_entries(), min_size=1, max_size=30))
def test_the_fold_of_a_read_log_equals_the_state_the_store_kept(backend: str, entries: list[NewEntry]) -> None:
    """One entry per request, sequentially: the cheapest path from random entries to ``get_state == fold``."""

    async def run(data_dir: Path) -> None:
        store = await factory_maker(backend, data_dir)().log_store(topics=("index",))
        try:
            await store.append(SCOPE, [NewEntry.make("declared", Actor.human("U1"), {"title": "t"})], create=True)
            for entry in entries:
                await store.append(SCOPE, [entry.model_copy(update={"idempotency_key": None})])
            log = await store.read(SCOPE)
            assert await store.get_state(SCOPE) == fold_all(SCOPE, log)
            assert (await store.verify(SCOPE)).ok
        finally:
            await store.close()

    with tempfile.TemporaryDirectory(prefix="decklog-prop-") as tmp:
        asyncio.run(run(Path(tmp)))


@SETTINGS
@given(entries=st.lists(new_entries(), min_size=1, max_size=30), cut=st.integers(min_value=0, max_value=31))
def test_a_batch_fold_equals_folding_one_at_a_time_and_leaves_the_state_it_started_from_alone(
    entries: list[NewEntry], cut: int
) -> None:
    """``fold_many`` updates in place the maps it copied: the result must still be the one-at-a-time fold, and the
    state it started from (which readers may hold) must not change."""

    async def run() -> list[Entry]:
        store = await MemoryFactory(MemoryStorage()).log_store(topics=())
        try:
            await store.append(SCOPE, [NewEntry.make("declared", Actor.human("U1"), {"title": "t"})], create=True)
            for entry in entries:
                await store.append(SCOPE, [entry.model_copy(update={"idempotency_key": None})])
            return await store.read(SCOPE)
        finally:
            await store.close()

    log = asyncio.run(run())
    one_at_a_time = empty_state(SCOPE)
    for entry in log:
        one_at_a_time = fold(one_at_a_time, entry)
    start = fold_all(SCOPE, log[:cut])
    start_json = start.to_json()
    batch = fold_many(start, log[cut:])
    assert batch == one_at_a_time
    assert batch.to_json() == one_at_a_time.to_json()
    assert start.to_json() == start_json, "the batch changed the state it started from"
