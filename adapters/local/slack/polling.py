"""Waiting for an effect the way tests must: poll a condition until a deadline, never a fixed sleep."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

__all__ = ["poll_until"]

T = TypeVar("T")


async def poll_until(
    predicate: Callable[[], T],
    *,
    timeout: float,
    what: str,
    context: Callable[[], str] = lambda: "",
    interval: float = 0.01,
) -> T:
    """``predicate()``'s first truthy value; ``AssertionError`` (with ``context()``) at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if loop.time() >= deadline:
            detail = context()
            raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f"\n{detail}" if detail else ""))
        await asyncio.sleep(interval)
