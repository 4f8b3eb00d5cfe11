"""The (action, target) gate across replicas (core/actions/run_targets.py): on a backend whose factory has shared
``Leases`` (PostgreSQL), a named lease in the shared database, so two replicas' runners in sibling incidents never
start the same action on the same target at once."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from decklog.core.actions import run_targets
from decklog.core.actions.run_targets import TargetGate
from decklog.core.store.ports import StorageFactory

PARAMS = {"service": "payments", "change": "change/r2026-09-19-4"}


async def test_a_second_replica_waits_then_gives_up_while_the_first_holds_the_gate(
    backend_factory: Callable[[], StorageFactory], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_targets, "WAIT_S", 0.3)
    one, two = backend_factory(), backend_factory()
    stores = [await one.log_store(), await two.log_store()]
    try:
        if one.leases() is None:
            pytest.skip(f"{one.name}: one process, no shared leases (the gate is an asyncio lock)")
        a, b = TargetGate(one.leases()), TargetGate(two.leases())
        async with a.hold("rollback_deploy", PARAMS, "run-a") as held:
            assert held
            async with b.hold("rollback_deploy", PARAMS, "run-b") as other:
                assert not other  # the same target, held elsewhere
            async with b.hold("rollback_deploy", {**PARAMS, "change": "change/other"}, "run-c") as elsewhere:
                assert elsewhere  # another target is another gate
        async with b.hold("rollback_deploy", PARAMS, "run-b") as after:
            assert after  # released when the first start was recorded, not when its lease ran out
    finally:
        for store in stores:
            await store.close()
        await one.close()
        await two.close()
