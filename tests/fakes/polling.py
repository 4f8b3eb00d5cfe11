"""Waiting for an effect the way tests must: poll a condition until a deadline, never a fixed sleep.

``wait_for(fake, predicate)`` and ``wait_for_call(fake, method)`` poll against the fake Slack (a failure lists
its recent Web API calls, when they are recorded: tests/fakes/slack_calls.py) or a fake service (adapters/local)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from decklog.adapters.local.slack import FakeSlack, FakeSlackServer
from tests.fakes.slack_calls import CallLog, CallRecorder, RecordedCall, slack_calls

__all__ = ["poll_until", "wait_for", "wait_for_call"]

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


def _recorded(target: Any) -> CallLog | None:
    server = target.server if isinstance(target, FakeSlack) else target
    if not isinstance(server, FakeSlackServer):
        return None
    return next((m.log for m in server.middlewares if isinstance(m, CallRecorder)), None)


async def wait_for(target: Any, predicate: Callable[[], T], timeout: float = 5.0, *, what: str | None = None) -> T:
    """``predicate()``'s first truthy value, polled; at the deadline an ``AssertionError`` (the fake Slack's
    recent calls attached, if recorded) — ``target`` is a ``FakeSlack``, a ``FakeSlackServer`` or a fake service."""
    log = _recorded(target)
    return await poll_until(
        predicate,
        timeout=timeout,
        what=what or str(getattr(predicate, "__name__", "condition")),
        context=log.describe_recent if log is not None else (lambda: ""),
    )


async def wait_for_call(
    target: FakeSlack | FakeSlackServer,
    method: str,
    where: Callable[[dict[str, Any]], bool] | None = None,
    *,
    timeout: float = 5.0,
    ok: bool | None = True,
) -> RecordedCall:
    """The first recorded call to ``method`` (answered ``ok``, whose ``args`` satisfy ``where``); the fake's
    calls must be recorded (``record_calls``)."""
    log = slack_calls(target)
    call = await poll_until(
        lambda: log.find_call(method, where, ok=ok),
        timeout=timeout,
        what=f"a call to {method}",
        context=log.describe_recent,
    )
    assert call is not None
    return call
