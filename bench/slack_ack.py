"""Slack ack latency and declare → header latency, against `decklog serve` on loopback.

    .venv/bin/python bench/slack_ack.py [--quick]

`decklog serve` runs as a subprocess in HTTP mode, pointed (DECKLOG_SLACK_API_URL) at the fake Slack Web API in
this process; requests are signed exactly as Slack signs them. Measured:

- ack latency p50/p99 with 1 and 16 concurrent clients, for signed slash commands (`/incident status <scope>`)
  and signed message events in an incident thread (each one appends an entry). decklog persists every request in
  its inbox (WAL, synchronous=FULL, group commit) before it acks: these are durable acks;
- requests per fsync: inbox requests persisted / durable inbox commits during each run (read from /metrics);
- declare → header posted: from sending `/incident declare …` to the fake Slack recording the header's
  chat.postMessage, p50/p99 (sequential declares).

Baseline, measured in the same run and interleaved: a bare Bolt app (bench/_bare_bolt.py: the same aiohttp +
Bolt adapter, signature verification on, a listener that only acks) — the floor any Bolt app pays. Targets: ack
p99 ≤ 25 ms at 16 clients (Slack allows 3,000 ms); declare → posted p50 ≤ 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._stats import Sample, fmt_ms, markdown_table, median_percentile_ms, note, verdict
from decklog.adapters.local.slack import FakeSlack, SlackDriver
from tests.fakes.polling import wait_for
from tests.fakes.slack_calls import record_calls, slack_calls

SECRET = "bench-signing-secret"
TOKEN = "xoxb-bench"


def _spawn(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        args, env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"(http://127\.0\.0\.1:\d+)", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r}")
    return proc, match.group(1)


def start_decklog(api_url: str, data_dir: str) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DECKLOG_", "SLACK_"))}
    env.update(
        {
            "DECKLOG_DATA_DIR": data_dir,
            "DECKLOG_PORT": "0",
            "SLACK_BOT_TOKEN": TOKEN,
            "SLACK_SIGNING_SECRET": SECRET,
            "DECKLOG_SLACK_API_URL": api_url,
            "DECKLOG_ALERTS_CHANNEL": "C0ALERTS",
            "DECKLOG_FIRST_TURN_DELAY": "3600",
            "DECKLOG_LOG_LEVEL": "WARNING",
        }
    )
    return _spawn([sys.executable, "-m", "decklog.bot.cli", "serve"], env)


def start_bare(api_url: str) -> tuple[subprocess.Popen[str], str]:
    return _spawn([sys.executable, str(ROOT / "bench" / "_bare_bolt.py"), api_url, SECRET, TOKEN], {})


class _BenchDriver(SlackDriver):
    """The fake's driver, with response URLs issued up front by the fake server in the parent process."""

    def __init__(self, events_url: str, response_urls: list[str]) -> None:
        super().__init__(events_url, SECRET)
        self._urls = iter(response_urls)

    def new_response_url(self, channel: str, user: str, **_: Any) -> str:
        return next(self._urls)


def client_process(
    events_url: str, kind: str, clients: int, per_client: int, thread: tuple[str, str], scope: str, urls: list[str]
) -> Sample:
    """The clients, in their own process: neither the fake Slack nor the server shares their CPU or GIL."""

    async def go() -> Sample:
        driver = _BenchDriver(events_url, urls)
        latencies: list[float] = []
        counter = 0

        async def client(n: int) -> None:
            nonlocal counter
            for _ in range(per_client):
                counter += 1
                started = time.perf_counter()
                if kind == "command":
                    status, _ = await driver.slash_command(f"status {scope}", "U0ALICE", "C0ALERTS")
                else:
                    ts = f"{1800000000 + counter}.{n:06d}"
                    event = {
                        "type": "message",
                        "channel": thread[0],
                        "user": "U0BOB",
                        "text": f"note {counter}",
                        "ts": ts,
                        "thread_ts": thread[1],
                        "channel_type": "channel",
                        "event_ts": ts,
                    }
                    status, _ = await driver.event(event, event_id=f"Ev{kind}{counter:08d}{n}{time.time_ns()}")
                latencies.append(time.perf_counter() - started)
                assert status == 200, status

        started = time.perf_counter()
        await asyncio.gather(*(client(n) for n in range(clients)))
        elapsed = time.perf_counter() - started
        await driver.close()
        return Sample(clients * per_client, elapsed, latencies)

    return asyncio.run(go())


async def wait_idle(url: str, timeout: float = 180.0) -> None:
    """Until decklog has finished the work behind earlier acks and drained its outbox (GET /metrics), so that a
    measurement starts from an idle server."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            async with http.get(url + "/metrics") as r:
                text = await r.text()
            busy = sum(
                float(line.split()[-1])
                for line in text.splitlines()
                if line.startswith(("decklog_outbox_pending{", "decklog_slack_work_in_flight"))
            )
            if busy == 0:
                return
            await asyncio.sleep(0.2)
    raise RuntimeError("decklog did not drain its outbox")


async def inbox_counters(url: str) -> tuple[float, float]:
    """(requests persisted, fsyncs) of decklog's inbox so far, from GET /metrics."""
    async with aiohttp.ClientSession() as http, http.get(url + "/metrics") as r:
        text = await r.text()
    values = {
        line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line.startswith("decklog_inbox_")
    }
    return values.get("decklog_inbox_persisted_total", 0.0), values.get("decklog_inbox_fsyncs_total", 0.0)


async def declare_latency(fake: FakeSlack, channels: list[str], tag: str) -> Sample:
    """Sequential declares, one per channel (Slack paces posts per channel, ~1/s), each timed from the signed
    slash command leaving to the fake Slack recording the header's chat.postMessage. One at a time: this is the
    latency a person sees, not a throughput test."""
    latencies = []
    for i, channel in enumerate(channels):
        title = f"bench {tag} {i} {time.time_ns()}"
        at = time.time()
        await fake.run_command("U0ALICE", channel, f"declare {title}")
        call = await wait_for(
            fake.server,
            lambda t=title: next(
                (c for c in slack_calls(fake).calls_to("chat.postMessage") if t in c.args.get("text", "")), None
            ),
            timeout=15,
        )
        latencies.append(call.at - at)
        await asyncio.sleep(0.1)  # let the rest of the declaration's work (thread link, index) finish
    return Sample(len(channels), sum(latencies), latencies)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    per_client = 20 if args.quick else 100
    declares = 15 if args.quick else 60
    rounds = 1 if args.quick else 3
    results: dict[str, list[Sample]] = {}
    per_fsync: dict[str, list[tuple[float, float]]] = {}
    async with FakeSlack(bot_token=TOKEN) as fake:
        record_calls(fake)
        fake.server.rate_limit_channels(None)
        with tempfile.TemporaryDirectory(prefix="decklog-bench-") as data_dir:
            decklog, url = await asyncio.to_thread(start_decklog, fake.base_url, data_dir)
            bare, bare_url = await asyncio.to_thread(start_bare, fake.base_url)
            try:
                d_url, b_url = f"{url}/slack/events", f"{bare_url}/slack/events"
                fake.use_http(d_url, SECRET)
                await fake.run_command("U0ALICE", "C0ALERTS", "declare Bench incident")
                await wait_for(fake.server, lambda: fake.workspace.history("C0ALERTS"), timeout=10)
                thread = ("C0ALERTS", fake.workspace.history("C0ALERTS")[-1].ts)
                scopes = await wait_for(
                    fake.server, lambda: [c for c in slack_calls(fake).calls_to("chat.postMessage")], timeout=10
                )
                scope = scopes[0].args["metadata"]["event_payload"]["scope"]
                channels = [
                    fake.workspace.create_channel(f"bench-{i}", creator="U0ALICE", members=("U0ALICE", "U0BOT")).id
                    for i in range(declares * rounds)
                ]
                pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
                loop = asyncio.get_running_loop()
                for r in range(rounds):
                    await wait_idle(url)
                    mine = channels[r * declares : (r + 1) * declares]
                    d = await declare_latency(fake, mine, str(r))
                    results.setdefault("declare", []).append(d)
                    slowest = ", ".join(f"{x * 1000:.0f}" for x in sorted(d.latencies)[-3:])
                    note(
                        f"round {r} declare: p50 {d.percentile_ms(50):.2f} ms p99 {d.percentile_ms(99):.2f} ms"
                        f" (slowest: {slowest} ms)"
                    )
                    for clients in (1, 16):
                        for kind in ("command", "event"):
                            order = (("decklog", d_url), ("bare Bolt", b_url))
                            for name, events_url in order if r % 2 == 0 else order[::-1]:
                                urls = (
                                    [
                                        fake.server.response_url("C0ALERTS", "U0ALICE")
                                        for _ in range(clients * per_client)
                                    ]
                                    if kind == "command"
                                    else []
                                )
                                before = await inbox_counters(url)
                                s = await loop.run_in_executor(
                                    pool, client_process, events_url, kind, clients, per_client, thread, scope, urls
                                )
                                results.setdefault(f"{name}|{kind}|{clients}", []).append(s)
                                if name == "decklog":
                                    after = await inbox_counters(url)
                                    per_fsync.setdefault(f"{kind}|{clients}", []).append(
                                        (after[0] - before[0], after[1] - before[1])
                                    )
                                note(
                                    f"round {r} {name} {kind} x{clients}: p50 {s.percentile_ms(50):.2f} ms p99 {s.percentile_ms(99):.2f} ms"
                                )
                pool.shutdown()
            finally:
                for proc in (decklog, bare):
                    proc.terminate()
                    proc.wait(timeout=60)  # decklog gives work in progress a short grace; the rest stays in its inbox
    rows = []
    for kind in ("command", "event"):
        for clients in (1, 16):
            d = results[f"decklog|{kind}|{clients}"]
            b = results[f"bare Bolt|{kind}|{clients}"]
            p50, p99 = median_percentile_ms(d, 50), median_percentile_ms(d, 99)
            b50, b99 = median_percentile_ms(b, 50), median_percentile_ms(b, 99)
            target = verdict(p99 <= 25) if clients == 16 else ""
            persisted = sum(n for n, _f in per_fsync[f"{kind}|{clients}"])
            fsyncs = sum(f for _n, f in per_fsync[f"{kind}|{clients}"])
            rows.append(
                [
                    f"ack, signed {'slash command' if kind == 'command' else 'message event'}",
                    str(clients),
                    fmt_ms(p50),
                    fmt_ms(p99),
                    fmt_ms(b50),
                    fmt_ms(b99),
                    f"{p99 / b99:.2f}×" if b99 else "n/a",
                    f"{persisted / fsyncs:.1f}" if fsyncs else "n/a",
                    target,
                ]
            )
    dec = results["declare"]
    print(
        f"## Slack acks, persisted before the ack ({rounds} interleaved rounds, medians of per-round percentiles, ms)\n"
    )
    print(
        markdown_table(
            [
                "request",
                "clients",
                "decklog p50",
                "decklog p99",
                "bare Bolt p50",
                "bare Bolt p99",
                "p99 ratio",
                "requests per fsync",
                "p99 ≤ 25 ms @16",
            ],
            rows,
        )
    )
    p50 = median_percentile_ms(dec, 50)
    print(
        f"\ndeclare → header posted on the fake: p50 {fmt_ms(p50)} ms ({verdict(p50 <= 20)} ≤ 20 ms), p99 {fmt_ms(median_percentile_ms(dec, 99))} ms over {declares} sequential declares per round, each from an idle server (outbox drained)"
    )


if __name__ == "__main__":
    asyncio.run(main())
