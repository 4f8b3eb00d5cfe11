"""Hostile HTTP clients: none of them slows the others down or knocks the server over.

- gzip bombs trickled into ``/slack/events`` without credentials: signed acks keep their pace (a ratio to the same
  acks measured without the attack, in the same test), the bombs get 415 before anything is decompressed or parsed;
- more idle connections than the server's file limit: health and signed acks still answer, and the log stays small;
- idle, slow-header and slow-body clients are closed; shutdown ends in a bounded time with requests in flight;
- malformed Slack requests (a timestamp that is not a number, JSON nested thousands deep, a ``response_url`` that is
  not Slack's) get a 4xx that names the problem, never a 500.

Everything goes through real HTTP: ``decklog serve`` as a subprocess (against the loopback fake Slack) where the
clients must not share the server's event loop, the server on port 0 in this process elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import signal
import socket
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from decklog.adapters.local.slack import FakeSlack
from decklog.adapters.local.slack.signing import signed_headers
from decklog.bot.server import DecklogServer
from tests.conftest import ServerFactory, eventually
from tests.helpers.serve import ALERT_TOKEN, ALICE, BOT_TOKEN, GENERAL, SIGNING_SECRET, Served, start_serve

#: 7.8 KB of gzip that a server with auto-decompression turns into 8 MB of form fields (2 million ``a=1``).
BOMB = gzip.compress(b"a=1&" * 2_000_000, 9)
TRICKLE_BYTES_S = 5.4 * 1024  # what the attack in the issue sent per connection
ACKS = 15


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, **kwargs: Any) -> AsyncIterator[tuple[FakeSlack, Served]]:
    async with FakeSlack(bot_token=BOT_TOKEN) as fake:
        served = await asyncio.to_thread(start_serve, tmp_path / "data", fake.base_url, **kwargs)
        fake.use_http(served.events_url, SIGNING_SECRET)
        try:
            yield fake, served
        finally:
            await asyncio.to_thread(served.stop, 60.0)


def host_port(served: Served) -> tuple[str, int]:
    host, port = served.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


async def timed(call: Callable[[], Awaitable[int]], n: int) -> tuple[list[float], list[int]]:
    """``n`` calls one after another: their durations and statuses."""
    seconds, statuses = [], []
    for _ in range(n):
        started = time.perf_counter()
        statuses.append(await call())
        seconds.append(time.perf_counter() - started)
    return seconds, statuses


async def bomb(host: str, port: int, *, trickle: bool, statuses: list[int], stop: asyncio.Event) -> None:
    """Post the gzip bomb to ``/slack/events`` unsigned, over and over: at 5.4 KiB/s, or all at once 5 times a second."""
    while not stop.is_set():
        writer = None
        try:
            reader, writer = await asyncio.open_connection(host, port)
            head = (
                f"POST /slack/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\nContent-Encoding: gzip\r\n"
                f"X-Slack-Request-Timestamp: {int(time.time())}\r\nX-Slack-Signature: v0={'0' * 64}\r\n"
                f"Content-Length: {len(BOMB)}\r\n\r\n"
            )
            writer.write(head.encode())
            step = 552 if trickle else len(BOMB)
            for i in range(0, len(BOMB), step):
                if stop.is_set():
                    break
                writer.write(BOMB[i : i + step])
                await writer.drain()
                await asyncio.sleep(step / TRICKLE_BYTES_S if trickle else 0)
            line = await asyncio.wait_for(reader.readline(), 60)
            statuses.append(int(line.split()[1]))
            if not trickle:
                await asyncio.sleep(0.2)
        except (OSError, TimeoutError, ValueError, IndexError):
            statuses.append(0)
            await asyncio.sleep(0.1)
        finally:
            if writer is not None:
                writer.close()


def rss_mb(pid: int) -> float:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


# -- gzip bombs on /slack/events ------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_signed_acks_keep_their_pace_while_gzip_bombs_trickle_in(tmp_path: Path) -> None:
    """Rounds of acks without the attack, then with it (4 connections trickling bombs at 5.4 KiB/s, one posting them
    whole 5 times a second): the medians over all rounds, so that load from elsewhere on the machine falls on both."""
    quiet_acks: list[float] = []
    loud_acks: list[float] = []
    quiet_health: list[float] = []
    loud_health: list[float] = []
    bombs: list[int] = []
    async with serving(tmp_path) as (fake, served), aiohttp.ClientSession() as http:
        driver = fake.driver
        host, port = host_port(served)

        async def ack() -> int:
            return (await driver.slash_command("help", user=ALICE, channel=GENERAL)).status

        async def health() -> int:
            async with http.get(f"{served.url}/healthz") as resp:
                return resp.status

        async def measure(acks: list[float], healths: list[float]) -> None:
            seconds, statuses = await timed(ack, ACKS // 3)
            assert statuses == [200] * len(statuses)
            acks += seconds
            healths += (await timed(health, ACKS // 3))[0]

        await timed(ack, 3)  # warm up both paths
        await timed(health, 3)
        rss_before = rss_mb(served.pid)
        for _round in range(3):
            await measure(quiet_acks, quiet_health)
            stop, answered = asyncio.Event(), len(bombs)
            attack = [
                *(asyncio.create_task(bomb(host, port, trickle=True, statuses=bombs, stop=stop)) for _ in range(4)),
                asyncio.create_task(bomb(host, port, trickle=False, statuses=bombs, stop=stop)),
            ]
            try:
                await eventually(lambda n=answered: len(bombs) > n, timeout=30, what="bombs answered")
                await measure(loud_acks, loud_health)
            finally:
                stop.set()
                await asyncio.gather(*attack, return_exceptions=True)
        rss_after = rss_mb(served.pid)

    ack_ratio = statistics.median(loud_acks) / statistics.median(quiet_acks)
    health_ratio = statistics.median(loud_health) / statistics.median(quiet_health)
    print(
        f"\nsigned acks: median {statistics.median(quiet_acks) * 1000:.1f} ms quiet, "
        f"{statistics.median(loud_acks) * 1000:.1f} ms under attack (ratio {ack_ratio:.2f}), max "
        f"{max(loud_acks) * 1000:.0f} ms; /healthz ratio {health_ratio:.2f}; bombs answered {sorted(set(bombs))} "
        f"x{len(bombs)}; server RSS {rss_before:.0f} -> {rss_after:.0f} MB"
    )
    assert set(bombs) - {0} == {415}, bombs  # refused at the head: nothing decompressed, parsed or stored
    assert ack_ratio < 5, (quiet_acks, loud_acks)
    assert health_ratio < 5, (quiet_health, loud_health)


async def test_slack_events_refuses_what_slack_never_sends_before_reading_it(server: DecklogServer) -> None:
    url = f"{server.url}/slack/events"
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=BOMB, headers={**form, "Content-Encoding": "gzip"}) as resp:
            assert resp.status == 415 and "Content-Encoding gzip" in (await resp.json())["error"]
        big = b"a=1&" * (300 * 1024)  # 1.2 MB, declared
        async with http.post(url, data=big, headers=form) as resp:
            assert resp.status == 413 and "larger than 1048576 bytes" in (await resp.json())["error"]

        async def chunks() -> AsyncIterator[bytes]:  # the same, chunked: no Content-Length to go by
            for _ in range(20):
                yield b"a=1&" * 16384

        async with http.post(url, data=chunks(), headers=form) as resp:
            assert resp.status == 413
        unsigned = b"a=1&" * 200_000  # 800 KB of form fields, under the cap, no signature: never parsed
        async with http.post(url, data=unsigned, headers=form) as resp:
            assert resp.status == 401 and "signature" in (await resp.json())["error"]
        async with http.post(url, data=b"ssl_check=1&token=x", headers=form) as resp:
            assert resp.status == 200  # Slack's certificate check, unsigned as Bolt allows
    assert not await server.runtime.store.scope_ids()


# -- idle connections and slow clients ------------------------------------------------------------------------------


@pytest.mark.slow
async def test_more_idle_connections_than_the_file_limit_leave_the_server_answering(tmp_path: Path) -> None:
    nofile, idle = 256, 300
    async with serving(tmp_path, nofile=nofile) as (fake, served), aiohttp.ClientSession() as http:
        host, port = host_port(served)
        sockets: list[socket.socket] = []
        try:
            for _ in range(idle):
                sock = socket.socket()
                sock.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    sock.connect((host, port))
                sockets.append(sock)

            async def health() -> bool:
                try:
                    async with http.get(f"{served.url}/healthz", timeout=aiohttp.ClientTimeout(total=5)) as resp:
                        return resp.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    return False

            async def acked() -> bool:
                try:
                    out = await asyncio.wait_for(fake.driver.slash_command("help", user=ALICE, channel=GENERAL), 5)
                    return out.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    return False

            await asyncio.sleep(0)
            await eventually(health, timeout=30, interval=0.2, what="/healthz with the idle connections open")
            await eventually(acked, timeout=30, interval=0.2, what="a signed ack with the idle connections open")
            # they are all still there (nothing was closed on the client side) and more keep coming
            for _ in range(50):
                sock = socket.socket()
                sock.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    sock.connect((host, port))
                sockets.append(sock)
            await eventually(health, timeout=30, interval=0.2, what="/healthz again")
        finally:
            for sock in sockets:
                sock.close()
        log = served.log.read_text(errors="replace")
        output = list(served.output)
    print(f"\nidle connections: {len(sockets)} against a file limit of {nofile}; log {len(log)} bytes")
    assert "Too many open files" not in log
    assert len(log) < 16 * 1024, log[-3000:]
    assert any(line.startswith("REST API (/api):") for line in output), (
        output
    )  # the start-up line says how the API is protected


async def test_idle_and_slow_header_connections_are_closed(
    make_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("decklog.bot.server.KEEPALIVE_S", 0.5)
    server = await make_server()
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    silent = await asyncio.open_connection(host, int(port))
    slow = await asyncio.open_connection(host, int(port))
    slow[1].write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ends its head
    kept = await asyncio.open_connection(host, int(port))
    kept[1].write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    for reader, _writer in (silent, slow):
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the server
    answered = await asyncio.wait_for(kept[0].read(), 10)  # answered, then closed once idle
    assert answered.startswith(b"HTTP/1.1 200")
    for _reader, writer in (silent, slow, kept):
        writer.close()


async def test_a_slow_slack_body_is_408_and_a_slow_body_elsewhere_is_cut(
    make_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("decklog.adapters.slack.http.SLACK_BODY_TIMEOUT_S", 0.5)
    server = await make_server(alert_token="t0ken")
    server.connections.body_timeout = 1.0
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"POST /slack/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\npayload=")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 408") and b"Connection: close" in head
    length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    assert b"did not arrive within" in await reader.readexactly(length)
    writer.close()
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST /alerts/generic HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer t0ken\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    )
    assert await asyncio.wait_for(reader.read(), 10) == b""  # the connection was closed
    writer.close()
    assert server.connections.too_slow == 1
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/healthz") as resp:
        assert resp.status == 200


# -- malformed Slack requests, response_url, shutdown ---------------------------------------------------------------


async def test_malformed_slack_requests_get_a_4xx_that_names_the_problem(
    server: DecklogServer, caplog: pytest.LogCaptureFixture
) -> None:
    driver = server.sandbox.driver
    out = await driver.signed_with(timestamp="noon").slash_command("declare Noon", ALICE, GENERAL)
    assert out.status == 400 and "X-Slack-Request-Timestamp" in out.json()["error"]
    nested = b'{"type": "event_callback", "event": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    out = await driver.post(nested, "application/json")  # signed
    assert out.status == 400 and "nested too deeply" in out.json()["error"]
    out = await driver.post(b'{"a": ' * 100 + b"1" + b"}" * 100, "application/json")  # valid JSON, 100 deep
    assert out.status == 400 and "nested too deeply" in out.json()["error"]
    async with aiohttp.ClientSession() as http:
        headers = {"Content-Type": "application/json", **signed_headers("wrong", nested)}
        async with http.post(f"{server.url}/slack/events", data=nested, headers=headers) as resp:
            assert resp.status == 401  # unsigned: never parsed
    assert not any("unhandled error" in r.getMessage() for r in caplog.records)
    assert not await server.runtime.store.scope_ids()


async def test_a_response_url_off_slack_is_refused_and_logged(
    server: DecklogServer, caplog: pytest.LogCaptureFixture
) -> None:
    driver = server.sandbox.driver
    fields = driver.payloads.slash_command(
        driver.workspace.user(ALICE),
        driver.workspace.channel(GENERAL),
        command="/incident",
        text="declare Exfiltrated",
        trigger_id=driver.new_trigger_id(ALICE),
        response_url="https://evil.example/collect",
    )
    with caplog.at_level(logging.WARNING):
        out = await driver.send_form(fields)
    assert out.status == 400 and "response_url" in out.json()["error"]
    assert any("evil.example" in r.getMessage() for r in caplog.records)
    on_slack = await driver.slash_command("list", ALICE, GENERAL)  # the fake's own response_url: Slack's host here
    assert on_slack.status == 200
    await eventually(lambda: server.sandbox.server.responses, what="the list answered on the response_url")
    assert not await server.runtime.store.scope_ids()


@pytest.mark.slow
async def test_shutdown_ends_in_bounded_time_with_requests_in_flight(tmp_path: Path) -> None:
    async with FakeSlack(bot_token=BOT_TOKEN) as fake:
        served = await asyncio.to_thread(start_serve, tmp_path / "data", fake.base_url)
        host, port = host_port(served)
        writers = []
        try:
            for head in (
                f"POST /alerts/generic HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {ALERT_TOKEN}\r\n"
                "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{",
                f"POST /slack/events HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100000\r\n\r\npayload=",
            ):
                _reader, writer = await asyncio.open_connection(host, port)
                writer.write(head.encode())
                await writer.drain()
                writers.append(writer)
            async with aiohttp.ClientSession() as http, http.get(f"{served.url}/healthz") as resp:
                assert resp.status == 200  # the two requests above are being read
            started = time.monotonic()
            served.proc.send_signal(signal.SIGTERM)
            await eventually(lambda: served.proc.poll() is not None, timeout=30, interval=0.1, what="the exit")
            print(f"\nstopped in {time.monotonic() - started:.1f} s with 2 requests in flight")
            assert served.proc.returncode == 0, served.log_tail()
        finally:
            for writer in writers:
                writer.close()
            if served.proc.poll() is None:
                served.kill()
