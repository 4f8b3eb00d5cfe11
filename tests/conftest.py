"""Shared fixtures: a real ``decklog serve`` on port 0 against the loopback fake Slack, and polling helpers.

Tests never sleep for a fixed time to wait for an effect: ``eventually`` polls with a deadline.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

import pytest

from decklog.bot.config import DecklogConfig, load_config
from decklog.bot.server import DecklogServer
from decklog.bot.settings import Settings, example_config_path
from decklog.bot.wiring import ALL_PARTS, PartName, Parts
from tests.fakes.slack_calls import record_sandbox_calls

T = TypeVar("T")

pytest_plugins = ["tests.pg"]  # a real PostgreSQL per test session: pg_session_url, pg_url

SLACK_ENV = ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "ANTHROPIC_API_KEY", "DECKLOG_API_TOKEN")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test inherits credentials or settings from the machine it runs on."""
    for name in SLACK_ENV:
        monkeypatch.delenv(name, raising=False)
    import os

    for name in list(os.environ):
        if name.startswith("DECKLOG_"):
            monkeypatch.delenv(name, raising=False)


async def eventually(check: Callable[[], Any], *, timeout: float = 5.0, interval: float = 0.02, what: str = "") -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = check()
            if inspect.isawaitable(last):
                last = await last
            if last:
                return last
        except AssertionError as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check!r}; last: {last!r}")
        await asyncio.sleep(interval)


def test_config(**sections: dict[str, Any]) -> DecklogConfig:
    """The shipped example config with test-speed overrides (no Slack pacing; agents fast)."""
    base = load_config(example_config_path())
    data = base.model_dump()
    data["slack"]["pace_per_channel_s"] = 0.0
    data["slack"]["header_update_interval_s"] = 0.0
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return DecklogConfig.model_validate(data)


ServerFactory = Callable[..., Awaitable[DecklogServer]]


@pytest.fixture
async def make_server(tmp_path: Path) -> AsyncIterator[ServerFactory]:
    started: list[DecklogServer] = []

    async def make(
        *,
        config: DecklogConfig | None = None,
        socket_mode: bool = False,
        data_dir: Path | None = None,
        parts: Collection[PartName] = ALL_PARTS,
        on_built: Callable[[Parts], None] | None = None,
        **settings: Any,
    ) -> DecklogServer:
        values: dict[str, Any] = {
            "data_dir": data_dir or tmp_path / "data",
            "host": "127.0.0.1",
            "port": 0,
            "first_turn_delay": 0.05,
            "turn_debounce": 0.05,
        }
        values.update(settings)

        def built(built_parts: Parts) -> None:
            record_sandbox_calls(built_parts)
            if on_built is not None:
                on_built(built_parts)

        server = DecklogServer(
            Settings(**values),
            socket_mode=socket_mode,
            config=config or test_config(),
            parts=parts,
            on_built=built,
        )
        await server.start()
        started.append(server)
        return server

    yield make
    for server in reversed(started):
        await server.stop()


@pytest.fixture
async def server(make_server: ServerFactory) -> DecklogServer:
    """decklog serve in sandbox mode: ``server.sandbox`` is the FakeSlack it talks to."""
    return await make_server()


test_config.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test
