"""bot/connections.py's small parts: the connection bound derived from the file limit, and error logs that never
repeat in a tight loop (asyncio's accept loop once logged "Too many open files" ~8,000 times a second)."""

from __future__ import annotations

import asyncio
import logging
import resource

import pytest

from decklog.bot.connections import MAX_CONNECTIONS, MIN_CONNECTIONS, LoopErrors, Throttled, connection_limit


def test_the_bound_is_half_the_file_limit_within_its_floor_and_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    for soft, bound in ((1024, 512), (256, 128), (10, MIN_CONNECTIONS), (1 << 20, MAX_CONNECTIONS)):
        monkeypatch.setattr(resource, "getrlimit", lambda _which, s=soft: (s, s))
        assert connection_limit() == bound


def test_a_throttled_line_is_logged_once_per_period_with_the_count_left_out(caplog: pytest.LogCaptureFixture) -> None:
    say = Throttled(logging.getLogger("decklog.test"), every=3600)
    with caplog.at_level(logging.WARNING):
        logged = [say(logging.WARNING, "k", "refused %d", n) for n in range(10_000)]
    assert logged.count(True) == 1 and [r.getMessage() for r in caplog.records] == ["refused 0"]
    say._last["k"] -= 3600  # the period is over
    with caplog.at_level(logging.WARNING):
        say(logging.WARNING, "k", "refused again")
    assert caplog.records[-1].getMessage().startswith("refused again (9999 more like it in the last")


async def test_loop_errors_pass_each_kind_on_once_per_period(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    errors = LoopErrors(every=3600)
    errors.install(loop)
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            for _ in range(10_000):
                loop.call_exception_handler(
                    {
                        "message": "socket.accept() out of system resource",
                        "exception": OSError(24, "Too many open files"),
                    }
                )
            loop.call_exception_handler({"message": "something else"})
    finally:
        errors.uninstall()
    messages = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert messages == ["socket.accept() out of system resource", "something else"]
    assert loop.get_exception_handler() is None
