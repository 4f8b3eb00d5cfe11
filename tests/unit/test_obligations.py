"""Obligations and fenced claims (core/obligations.py) against the real SQLite log store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from decklog.core.clock import ManualClock
from decklog.core.entries import Actor, FenceRejected, ObligationClaimed
from decklog.core.errors import Conflict, NotFound, StaleFence
from decklog.core.obligations import (
    cancel,
    check_fence,
    claim,
    expire_leases,
    fenced,
    fulfil,
    open_obligation,
    reject_stale,
    release,
)
from decklog.core.service import ScopeService
from decklog.core.store.sqlite.log_store import SqliteLogStore

ALICE = Actor.human("U0ALICE", "alice")
AGENT = Actor.agent("verify", "verifier")


@pytest.fixture
async def env(tmp_path: Path):
    clock = ManualClock()
    store = SqliteLogStore(tmp_path / "data", clock=clock)
    from decklog.core.store.sqlite.index import SqliteIndex

    index = SqliteIndex(tmp_path / "data" / "index.db", store.executor)
    await index.open()
    scope = (await ScopeService(store, index).declare(title="Payments 5xx", actor=ALICE)).state.scope
    yield store, clock, scope
    await index.close()
    await store.close()


async def _open(store: SqliteLogStore, scope: str, oid: str = "ob-1", **kw: object) -> None:
    await store.append(
        scope, lambda s: open_obligation(s, text="verify the rollback", actor=AGENT, obligation_id=oid, **kw)
    )


async def _claim(
    store: SqliteLogStore, clock: ManualClock, scope: str, oid: str, holder: str, lease: float = 60
) -> int:
    result = await store.append(
        scope, lambda s: claim(s, oid, holder=holder, now=clock.now(), lease_seconds=lease, actor=AGENT)
    )
    payload = result.entries[0].payload
    assert isinstance(payload, ObligationClaimed)
    return payload.fence


async def test_opening_is_idempotent_by_id_and_records_what_to_do(env) -> None:
    store, _clock, scope = env
    await _open(store, scope, purpose="verification", expected_outcome="alerts resolve", run_id="run-1", due_at="x")
    await _open(store, scope)
    state = await store.get_state(scope)
    ob = state.obligations["ob-1"]
    assert (ob.purpose, ob.expected_outcome, ob.run_id, ob.status) == (
        "verification",
        "alerts resolve",
        "run-1",
        "open",
    )
    assert len(await store.read(scope, kinds=["obligation_opened"])) == 1


async def test_each_claim_gets_a_fence_greater_than_every_earlier_one_in_the_scope(env) -> None:
    store, clock, scope = env
    for oid in ("ob-1", "ob-2"):
        await _open(store, scope, oid)
    f1 = await _claim(store, clock, scope, "ob-1", "a", lease=10)
    f2 = await _claim(store, clock, scope, "ob-2", "b", lease=10)
    clock.advance(seconds=11)
    f3 = await _claim(store, clock, scope, "ob-1", "c", lease=10)
    assert f1 < f2 < f3
    assert (await store.get_state(scope)).max_fence == f3


async def test_a_live_lease_makes_another_claim_a_conflict(env) -> None:
    store, clock, scope = env
    await _open(store, scope)
    await _claim(store, clock, scope, "ob-1", "a")
    with pytest.raises(Conflict, match="held by a"):
        await _claim(store, clock, scope, "ob-1", "b")
    with pytest.raises(NotFound):
        await _claim(store, clock, scope, "ob-nope", "b")


async def test_concurrent_claims_on_one_obligation_grant_exactly_one_lease(env) -> None:
    store, clock, scope = env
    await _open(store, scope)
    results = await asyncio.gather(
        *(_claim(store, clock, scope, "ob-1", f"holder-{i}") for i in range(12)), return_exceptions=True
    )
    granted = [r for r in results if isinstance(r, int)]
    assert len(granted) == 1
    assert all(isinstance(r, Conflict) for r in results if not isinstance(r, int))


async def test_a_write_by_a_stale_fence_is_rejected_with_a_reason_and_recorded(env) -> None:
    store, clock, scope = env
    await _open(store, scope)
    old = await _claim(store, clock, scope, "ob-1", "slow", lease=5)
    clock.advance(seconds=6)
    new = await _claim(store, clock, scope, "ob-1", "fast", lease=5)
    with pytest.raises(StaleFence) as caught:
        await store.append(scope, lambda s: fulfil(s, "ob-1", fence=old, now=clock.now(), actor=AGENT))
    assert caught.value.fence == old and caught.value.current == new
    assert f"fence {old} on ob-1 is stale (current fence {new}" in caught.value.message
    await store.append(
        scope,
        lambda s: reject_stale(s, caught.value, obligation_id="ob-1", holder="slow", attempted="fulfil", actor=AGENT),
    )
    rejected = [e.payload for e in await store.read(scope, kinds=["fence_rejected"])]
    assert rejected == [
        FenceRejected(
            obligation_id="ob-1",
            fence=old,
            current_fence=new,
            holder="slow",
            attempted="fulfil",
            reason=caught.value.message,
        )
    ]
    await store.append(scope, lambda s: fulfil(s, "ob-1", fence=new, now=clock.now(), actor=AGENT, note="done"))
    assert "ob-1" not in (await store.get_state(scope)).obligations


async def test_a_write_after_the_lease_passed_is_rejected_even_with_no_newer_holder(env) -> None:
    store, clock, scope = env
    await _open(store, scope)
    fence = await _claim(store, clock, scope, "ob-1", "a", lease=5)
    state = await store.get_state(scope)
    assert check_fence(state, "ob-1", fence, clock.now()).holder == "a"
    clock.advance(seconds=5)
    with pytest.raises(StaleFence, match="lease of fence"):
        check_fence(await store.get_state(scope), "ob-1", fence, clock.now())
    with pytest.raises(StaleFence):
        fenced(await store.get_state(scope), "ob-1", fence, clock.now(), [])


async def test_the_sweep_expires_passed_leases_and_the_obligation_can_be_claimed_again(env) -> None:
    store, clock, scope = env
    await _open(store, scope, "ob-1")
    await _open(store, scope, "ob-2")
    await _claim(store, clock, scope, "ob-1", "a", lease=5)
    await _claim(store, clock, scope, "ob-2", "b", lease=500)
    clock.advance(seconds=6)
    swept = await store.append(scope, lambda s: expire_leases(s, now=clock.now()))
    assert [e.payload.obligation_id for e in swept.entries] == ["ob-1"]  # type: ignore[attr-defined]
    state = swept.state
    assert state.obligations["ob-1"].status == "open" and state.obligations["ob-2"].status == "claimed"
    assert (await store.append(scope, lambda s: expire_leases(s, now=clock.now()))).entries == ()
    assert await _claim(store, clock, scope, "ob-1", "c") > state.obligations["ob-2"].fence


async def test_release_and_cancel(env) -> None:
    store, clock, scope = env
    await _open(store, scope, "ob-1")
    await _open(store, scope, "ob-2")
    fence = await _claim(store, clock, scope, "ob-1", "a")
    await store.append(scope, lambda s: release(s, "ob-1", fence=fence, now=clock.now(), actor=AGENT, reason="later"))
    state = await store.get_state(scope)
    assert state.obligations["ob-1"].status == "open" and state.obligations["ob-1"].holder == ""
    with pytest.raises(StaleFence):  # released: the old fence is no longer a holder's
        await store.append(scope, lambda s: release(s, "ob-1", fence=fence, now=clock.now(), actor=AGENT))
    await store.append(scope, lambda s: cancel(s, "ob-2", actor=ALICE, reason="not needed"))
    assert "ob-2" not in (await store.get_state(scope)).obligations
    assert (await store.verify(scope)).ok


async def test_a_rejection_names_the_obligations_own_current_fence(env) -> None:
    store, clock, scope = env
    await _open(store, scope, "ob-1")
    await _open(store, scope, "ob-2")
    old = await _claim(store, clock, scope, "ob-1", "slow", lease=5)
    clock.advance(seconds=6)
    current = await _claim(store, clock, scope, "ob-1", "fast", lease=60)
    await _claim(store, clock, scope, "ob-2", "other", lease=60)  # a later fence on another obligation
    state = await store.get_state(scope)
    with pytest.raises(StaleFence) as caught:
        check_fence(state, "ob-1", old, clock.now())
    (entry,) = reject_stale(state, caught.value, obligation_id="ob-1", holder="slow", attempted="x", actor=AGENT)
    assert entry.payload.current_fence == current < state.max_fence  # type: ignore[attr-defined]
