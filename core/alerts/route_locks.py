"""The port behind the alert router's routing locks: ``async with locks.hold("fp:abc", "svc:payments"): ...``.

One process: ``core.alerts.locks.KeyedLocks`` (asyncio locks). Several replicas on one database: a
``RouteLocks`` that also excludes the other processes (PostgreSQL advisory locks, core/store/postgres_locks.py),
so that the same fingerprint posted to two replicas at once is routed by one of them at a time — the second
finds the first's claim in the shared index and appends to its incident instead of opening another.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol


class RouteLocks(Protocol):
    def hold(self, *keys: str) -> AbstractAsyncContextManager[None]:
        """Hold every key (taken in sorted order) for the body of the ``async with``."""
