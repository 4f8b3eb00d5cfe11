"""The durable Slack path end to end: 16 clients send signed message events into 16 incident threads.

    .venv/bin/python bench/slack_durable.py [--seconds 8] [--clients 16] [--no-profile]

Against `decklog serve` (a subprocess, HTTP mode, pointed at the fake Slack in this process) and, in the same run,
a bare Bolt app (bench/_bare_bolt.py: verifies signatures, acks). The clients run in their own process. Reported:

- acks/s of each, and decklog's *durable* acks/s: acked events whose entry was already in the log when the load
  stopped (checked by idempotency key in the scope files), over the same time; then every acked entry must be
  in the log once the server is idle (else the run fails);
- the server's CPU (utime+stime from /proc/<pid>/stat, from before the load until idle) per recorded entry;
- the ratio durable/bare (target ≥ 0.5) and CPU per entry (target ≤ 0.5 ms);
- with py-spy on PATH or in the venv (not a dependency): where the server's time went, sampled with
  ``py-spy record --nonblocking`` over the load, as shares of samples by layer and the top leaf functions.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from decklog.adapters.local.slack import FakeSlack, SlackDriver
from tests.helpers.log_view import linked_threads, read_log
from tests.helpers.serve import ALICE, BOT_TOKEN, GENERAL, SIGNING_SECRET, start_serve

LAYERS = (  # first match wins, tested on the whole sampled stack (outermost → innermost)
    ("user-name lookup (users.info)", ("users_info", "deps.py:human")),
    ("inbox", ("inbox",)),
    ("index delivery", ("core/index/", "core/store/sqlite/index.py", "core/store/postgres/index.py")),
    ("outbox / dispatcher", ("core/outbox/",)),
    ("fold (state)", ("core/state/",)),
    ("append (store)", ("core/store/",)),
    ("Slack sender", ("adapters/slack/sender.py",)),
    ("listeners / service", ("adapters/slack/listeners", "core/service.py")),
    ("Bolt", ("slack_bolt",)),
    ("aiohttp", ("aiohttp",)),
)


def clients(events_url: str, threads: list[tuple[str, str]], seconds: float) -> tuple[list[str], float]:
    """Runs in its own process: each client posts message events into its thread for ``seconds``; returns the
    idempotency keys of the acked ones and the elapsed time."""

    async def go() -> tuple[list[str], float]:
        driver = SlackDriver(events_url, SIGNING_SECRET)
        acked: list[str] = []
        stop = time.monotonic() + seconds

        async def client(n: int, channel: str, thread_ts: str) -> None:
            i = 0
            while time.monotonic() < stop:
                i += 1
                ts = f"{1800000000 + i}.{n:06d}"
                event = {
                    "type": "message", "channel": channel, "user": "U0BOB", "text": f"note {n}-{i}", "ts": ts,
                    "thread_ts": thread_ts, "channel_type": "channel", "event_ts": ts,
                }  # fmt: skip
                status, _ = await driver.event(event, event_id=f"EvD{n:03d}{i:08d}")
                if status == 200:
                    acked.append(f"slack:msg:{channel}:{ts}")

        started = time.monotonic()
        await asyncio.gather(*(client(n, c, t) for n, (c, t) in enumerate(threads)))
        elapsed = time.monotonic() - started
        await driver.close()
        return acked, elapsed

    return asyncio.run(go())


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def keys_in_log(data: Path) -> Counter[str]:
    return Counter(r.key for f in read_log(data).values() for r in f.rows if r.key and r.kind == "message")


async def run_load(events_url: str, threads: list[tuple[str, str]], seconds: float) -> tuple[list[str], float]:
    with ProcessPoolExecutor(1) as pool:
        return await asyncio.get_running_loop().run_in_executor(pool, clients, events_url, threads, seconds)


async def decklog(fake: FakeSlack, data: Path, n: int, seconds: float, profile: Path | None) -> dict[str, float]:
    served = await asyncio.to_thread(start_serve, data, fake.base_url)
    try:
        fake.use_http(served.events_url, SIGNING_SECRET)
        for i in range(n):
            await fake.run_command(ALICE, GENERAL, f"declare Durable bench thread {i} sev3")
        deadline = time.monotonic() + 120
        while len(linked := await asyncio.to_thread(linked_threads, data)) < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(linked)} of {n} incidents got a thread")
            await asyncio.sleep(0.1)
        threads = [(fake.workspace.channel(GENERAL).id, ts) for ts in sorted(linked.values())]
        await fake.post_message(ALICE, GENERAL, "warm the user cache", thread_ts=threads[0][1])
        before_keys = len(await asyncio.to_thread(keys_in_log, data))
        spy = _spy(served.pid, profile, seconds) if profile else None
        cpu0 = cpu_seconds(served.pid)
        acked, elapsed = await run_load(served.events_url, threads, seconds)
        at_last_ack = await asyncio.to_thread(keys_in_log, data)
        stopped = time.monotonic()
        while True:  # until every acked entry is in the log and the CPU has gone quiet
            present = await asyncio.to_thread(keys_in_log, data)
            if all(present[k] for k in acked) or time.monotonic() - stopped > 120:
                break
            await asyncio.sleep(0.1)
        drained = time.monotonic() - stopped
        while True:  # and until the server has gone quiet (the outbox work behind the entries is CPU too)
            c = cpu_seconds(served.pid)
            await asyncio.sleep(0.5)
            if cpu_seconds(served.pid) - c < 0.05 or time.monotonic() - stopped > 120:
                break
        cpu = cpu_seconds(served.pid) - cpu0
        if spy is not None:
            spy.wait(timeout=120)
    finally:
        await asyncio.to_thread(served.stop)
    missing = [k for k in acked if not present[k]]
    twice = [k for k in acked if present[k] > 1]
    if missing or twice:
        raise SystemExit(f"decklog: {len(missing)} acked entries missing, {len(twice)} twice (e.g. {missing[:3]})")
    recorded = len(present) - before_keys
    return {
        "acks": len(acked) / elapsed,
        "durable": sum(1 for k in acked if at_last_ack[k]) / elapsed,
        "drain": drained,
        "cpu_ms": cpu / max(recorded, 1) * 1000,
        "entries": recorded,
    }


def _spy(pid: int, out: Path, seconds: float) -> subprocess.Popen[bytes] | None:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        print("  (py-spy not found: no profile; `pip install py-spy` to get one)")
        return None
    return subprocess.Popen(
        [
            exe,
            "record",
            "--nonblocking",
            "-r",
            "250",
            "-d",
            str(int(seconds) + 3),
            "-f",
            "raw",
            "-o",
            str(out),
            "-p",
            str(pid),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def print_profile(path: Path, top: int = 12) -> None:
    if not path.exists():
        return
    layers: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        layers[next((name for name, marks in LAYERS if any(m in stack for m in marks)), "other")] += n
        leaves[stack.rsplit(";", 1)[-1]] += n
    if not total:
        return
    print(f"  where decklog's time went ({total} samples over the load, py-spy):")
    for name, n in layers.most_common():
        print(f"    {n / total:6.1%}  {name}")
    print("  top leaf functions:")
    for name, n in leaves.most_common(top):
        print(f"    {n / total:6.1%}  {name[:110]}")


async def bare(fake: FakeSlack, n: int, seconds: float) -> float:
    proc = subprocess.Popen(  # noqa: ASYNC220 - once, before the measurement
        [sys.executable, str(ROOT / "bench" / "_bare_bolt.py"), fake.base_url, SIGNING_SECRET, BOT_TOKEN],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        url = (await asyncio.to_thread(proc.stdout.readline)).split()[-1]
        channel = fake.workspace.channel(GENERAL).id
        acked, elapsed = await run_load(
            f"{url}/slack/events", [(channel, f"1700000000.{i:06d}") for i in range(n)], seconds
        )
        return len(acked) / elapsed
    finally:
        proc.kill()
        proc.wait()


async def main(seconds: float, n: int, profile: bool, keep: str = "") -> int:
    with tempfile.TemporaryDirectory(prefix="decklog-durable-") as tmp:
        async with FakeSlack(bot_token=BOT_TOKEN) as fake:
            bare_rate = await bare(fake, n, seconds)
            prof = Path(tmp) / "profile.txt" if profile else None
            d = await decklog(fake, Path(tmp) / "data", n, seconds, prof)
            print(f"durable Slack path: {n} clients → {n} incident threads, {seconds:.0f} s each")
            print(f"  bare Bolt acks/s          {bare_rate:8.0f}")
            print(f"  decklog acks/s            {d['acks']:8.0f}")
            print(
                f"  decklog durable acks/s    {d['durable']:8.0f}   ratio to bare Bolt {d['durable'] / bare_rate:.2f}"
                "  (target ≥ 0.5)"
            )
            print(f"  CPU per recorded entry    {d['cpu_ms']:8.2f} ms  (target ≤ 0.5 ms; {d['entries']:.0f} entries)")
            print(f"  all acked entries in the log {d['drain']:.1f} s after the load stopped")
            if prof is not None:
                print_profile(prof)
                if keep and prof.exists():
                    shutil.copy(prof, keep)
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--keep-profile", default="", help="copy py-spy's raw stacks to this path")
    a = ap.parse_args()
    sys.exit(asyncio.run(main(a.seconds, a.clients, not a.no_profile, a.keep_profile)))
