"""The (action, target) gate on PostgreSQL (core/actions/run_targets.py): a named lease in the shared database, so
two replicas' runners in sibling incidents never start the same action on the same target at once."""

from __future__ import annotations

import pytest

from core.actions import run_targets
from core.actions.run_targets import TargetGate
from core.store.postgres import PostgresLogStore

PARAMS = {"service": "payments", "change": "change/r2026-09-19-4"}


async def test_a_second_replica_waits_then_gives_up_while_the_first_holds_the_gate(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_targets, "WAIT_S", 0.3)
    one, two = PostgresLogStore(pg_url), PostgresLogStore(pg_url)
    try:
        a, b = TargetGate(one), TargetGate(two)
        async with a.hold("rollback_deploy", PARAMS, "run-a") as held:
            assert held
            async with b.hold("rollback_deploy", PARAMS, "run-b") as other:
                assert not other  # the same target, held elsewhere
            async with b.hold("rollback_deploy", {**PARAMS, "change": "change/other"}, "run-c") as elsewhere:
                assert elsewhere  # another target is another gate
        async with b.hold("rollback_deploy", PARAMS, "run-b") as after:
            assert after  # released when the first start was recorded, not when its lease ran out
    finally:
        await one.close()
        await two.close()
