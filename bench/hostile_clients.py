"""``bench/hostile_clients.py bombs|idle``: ``decklog serve`` (HTTP mode, the loopback fake Slack) under two
attacks that once slowed or knocked it over, measured against the same server without them, in the same run.

- ``bombs``: 4 connections post a 7.8 KB gzip bomb (8 MB of form fields once decompressed) to ``/slack/events``,
  unsigned, at 5.4 KiB/s each, over and over. Signed ``/incident help`` acks and ``/healthz`` are timed one after
  another, quiet then under attack: medians, worst, the ratio; the server's RSS before and after.
- ``idle``: the server runs with ``RLIMIT_NOFILE`` 1024 (a common systemd default); 1,100 connections are opened
  and left idle. Every 5 s for 30 s, one ``/healthz`` and one signed ack are timed (10 s timeout each); then the
  size of the server's log and its count of "Too many open files".

Run it from the checkout to measure (``PYTHONPATH=. .venv/bin/python bench/hostile_clients.py bombs``): the server
is that checkout's code (``tests/helpers/serve.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import resource
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

from decklog.adapters.local.slack import FakeSlack
from tests.helpers.serve import ALICE, BOT_TOKEN, GENERAL, SIGNING_SECRET, Served, start_serve

BOMB = gzip.compress(b"a=1&" * 2_000_000, 9)
RATE = 5.4 * 1024
N = 20


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def timed(call: Callable[[], Awaitable[object]], n: int, timeout: float) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        try:
            await asyncio.wait_for(call(), timeout)
            out.append(time.perf_counter() - started)
        except Exception:
            out.append(float("inf"))
    return out


def fmt(values: list[float]) -> str:
    finite = [v for v in values if v != float("inf")]
    lost = len(values) - len(finite)
    median = statistics.median(values) if values else 0.0
    worst = max(finite) if finite else float("inf")
    return f"median {median * 1000:.1f} ms, worst {worst * 1000:.0f} ms" + (f", {lost} timed out" if lost else "")


async def trickle(host: str, port: int, stop: asyncio.Event, statuses: list[int]) -> None:
    while not stop.is_set():
        writer = None
        try:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(
                f"POST /slack/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\nContent-Encoding: gzip\r\n"
                f"Content-Length: {len(BOMB)}\r\n\r\n".encode()
            )
            for i in range(0, len(BOMB), 552):
                writer.write(BOMB[i : i + 552])
                await writer.drain()
                await asyncio.sleep(552 / RATE)
            statuses.append(int((await asyncio.wait_for(reader.readline(), 60)).split()[1]))
        except Exception:
            statuses.append(0)
        finally:
            if writer is not None:
                writer.close()


async def bombs(served: Served, fake: FakeSlack) -> None:
    driver = fake.use_http(served.events_url, SIGNING_SECRET)
    host, port = served.url.removeprefix("http://").rsplit(":", 1)
    async with aiohttp.ClientSession() as http:

        async def ack() -> None:
            assert (await driver.slash_command("help", user=ALICE, channel=GENERAL)).status == 200

        async def health() -> None:
            async with http.get(f"{served.url}/healthz") as resp:
                assert resp.status == 200

        await timed(ack, 3, 30)
        quiet_ack, quiet_health, rss0 = await timed(ack, N, 30), await timed(health, N, 30), rss_mb(served.pid)
        stop, statuses = asyncio.Event(), []
        attack = [asyncio.create_task(trickle(host, int(port), stop, statuses)) for _ in range(4)]
        await asyncio.sleep(3)
        loud_ack, loud_health = await timed(ack, N, 30), await timed(health, N, 30)
        rss1 = rss_mb(served.pid)
        stop.set()
        await asyncio.gather(*attack, return_exceptions=True)
        await driver.close()
    print(f"signed acks, quiet:        {fmt(quiet_ack)}")
    print(f"signed acks, under attack: {fmt(loud_ack)}")
    print(f"  ratio of medians: {statistics.median(loud_ack) / statistics.median(quiet_ack):.1f}")
    print(f"/healthz, quiet:           {fmt(quiet_health)}")
    print(f"/healthz, under attack:    {fmt(loud_health)}")
    print(f"  ratio of medians: {statistics.median(loud_health) / statistics.median(quiet_health):.1f}")
    print(f"bombs answered: {sorted(set(statuses))} x{len(statuses)}; server RSS {rss0:.0f} -> {rss1:.0f} MB")


async def idle(served: Served, fake: FakeSlack, count: int = 1100, hold: float = 30.0) -> None:
    driver = fake.use_http(served.events_url, SIGNING_SECRET)
    host, port = served.url.removeprefix("http://").rsplit(":", 1)
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            sock.connect((host, int(port)))
        sockets.append(sock)
    async with aiohttp.ClientSession() as http:

        async def ack() -> None:
            assert (await driver.slash_command("help", user=ALICE, channel=GENERAL)).status == 200

        async def health() -> None:
            async with http.get(f"{served.url}/healthz") as resp:
                assert resp.status == 200

        started = time.monotonic()
        while time.monotonic() - started < hold:
            h, a = await timed(health, 1, 10), await timed(ack, 1, 10)
            print(f"t={time.monotonic() - started:4.0f}s  /healthz {fmt(h)}; signed ack {fmt(a)}")
            await asyncio.sleep(5)
    for sock in sockets:
        sock.close()
    await driver.close()
    text = served.log.read_text(errors="replace")
    print(
        f"{count} idle connections, RLIMIT_NOFILE 1024: log {len(text) / 1e6:.1f} MB, {text.count(chr(10))} lines, "
        f"'Too many open files' x{text.count('Too many open files')}"
    )


async def main(what: str) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(8192, hard), hard))  # this client holds 1,100 sockets
    with tempfile.TemporaryDirectory(prefix="decklog-hostile-") as tmp:
        async with FakeSlack(bot_token=BOT_TOKEN) as fake:
            nofile = 1024 if what == "idle" else None
            served = await asyncio.to_thread(start_serve, Path(tmp) / "data", fake.base_url, nofile=nofile)
            try:
                await (idle(served, fake) if what == "idle" else bombs(served, fake))
            finally:
                await asyncio.to_thread(served.stop, 90.0)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("bombs", "idle"):
        sys.exit("usage: bench/hostile_clients.py bombs|idle")
    asyncio.run(main(sys.argv[1]))
