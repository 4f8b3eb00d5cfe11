"""Racing claimers: N concurrent claimers over 1,000 obligations (spread over ten scopes), pausing at random
points of a run for longer than the lease. Every obligation is fulfilled exactly once, by its latest fence;
every stale write is rejected and recorded; the executor sees one effect per obligation (and never two for
one idempotency key)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from decklog.core.actions.run_authority import RunAuthority
from decklog.core.entries import (
    ActionResult,
    ActionStarted,
    FenceRejected,
    NewEntry,
    ObligationClaimed,
    ObligationFulfilled,
    ObligationReleased,
)
from decklog.core.errors import DecklogError
from decklog.core.obligations import open_obligation
from decklog.core.state import ScopeState
from tests.actions_support import AGENT, desk_kit, effect_action, pid_of

OBLIGATIONS = 1000
SCOPES = 10
CLAIMERS = 16
LEASE = 1.0
PAUSE_P = 0.02


@pytest.mark.slow
async def test_racing_claimers_fulfil_each_obligation_once_by_the_latest_fence(tmp_path: Path) -> None:
    rng = random.Random(20260919)
    pauses = Counter[str]()

    async def checkpoint(point: str, _auth: RunAuthority) -> None:
        if rng.random() < PAUSE_P:
            pauses[point] += 1
            await asyncio.sleep(LEASE * rng.uniform(1.2, 1.6))  # the injected pause: longer than the lease

    async with desk_kit(
        tmp_path, actions=[effect_action(timeout=0.25)], lease_seconds=LEASE, lease_margin=0.3, checkpoint=checkpoint
    ) as kit:
        scopes = [await kit.declare(f"Race {i}") for i in range(SCOPES)]
        todo: dict[tuple[str, str], None] = {}
        for k, scope in enumerate(scopes):

            def open_many(s: ScopeState, k: int = k) -> list[NewEntry]:
                return [
                    e
                    for i in range(k, OBLIGATIONS, SCOPES)
                    for e in open_obligation(s, text=f"task {i}", params={"target": f"t-{i}"}, actor=AGENT)
                ]

            opened = await kit.store.append(scope, open_many)
            todo.update({(scope, e.payload.obligation_id): None for e in opened.entries})  # type: ignore[attr-defined]
        assert len(todo) == OBLIGATIONS

        async def claimer(n: int) -> None:
            mine = random.Random(n)
            while todo:
                batch = mine.sample(list(todo), k=min(len(todo), 40))
                if len(batch) < 40:
                    await asyncio.sleep(0.005)  # a claimer's poll interval when little work is left
                for scope, ob in batch:
                    state = await kit.store.get_state(scope)
                    if ob not in state.obligations:
                        todo.pop((scope, ob), None)
                        continue
                    pid = next((p.id for p in state.proposals.values() if p.obligation_id == ob), None)
                    try:
                        if pid is None:
                            target = state.obligations[ob].params["target"]
                            line = await kit.desk.propose(
                                scope,
                                action="poke",
                                params={"target": target},
                                rationale="race",
                                obligation_id=ob,
                                actor=AGENT,
                            )
                            pid = pid_of(line)
                        await kit.desk.execute(scope, pid, receipt=f"claimer-{n}")
                    except DecklogError:
                        continue  # another claimer got there first (proposal conflict, lease held)

        await asyncio.wait_for(asyncio.gather(*(claimer(n) for n in range(CLAIMERS))), timeout=600)

        fulfilled: Counter[str] = Counter()
        rejected = 0
        for scope in scopes:
            current: dict[str, int] = {}
            latest: dict[str, int] = defaultdict(int)
            for entry in await kit.store.read(scope):
                p = entry.payload
                if isinstance(p, ObligationClaimed):
                    assert p.fence > latest[p.obligation_id]
                    current[p.obligation_id] = latest[p.obligation_id] = p.fence
                elif isinstance(p, ActionStarted | ObligationReleased | ObligationFulfilled):
                    assert p.fence == current[p.obligation_id], f"#{entry.seq} wrote under a stale fence"
                    if isinstance(p, ObligationFulfilled):
                        assert p.fence == latest[p.obligation_id]
                        fulfilled[f"{scope}:{p.obligation_id}"] += 1
                elif isinstance(p, ActionResult):
                    assert p.fence in current.values()
                elif isinstance(p, FenceRejected):
                    rejected += 1
            assert (await kit.store.verify(scope)).ok
            assert not (await kit.store.get_state(scope)).obligations

        assert len(fulfilled) == OBLIGATIONS and set(fulfilled.values()) == {1}
        assert rejected == kit.desk.runner.stats.stale > 0, "the pauses must have produced stale holders"
        kit.deploy.assert_at_most_once_per_key()
        per_target = Counter(e.request["params"]["target"] for e in kit.deploy.effects)
        assert len(per_target) == OBLIGATIONS and set(per_target.values()) == {1}
        assert sum(pauses.values()) > 0
