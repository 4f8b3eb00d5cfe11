"""SIGKILL mid-load, at random moments, 20+ times: no acknowledged entry lost, seqs gapless, the chain verifies,
and the outbox delivers every entry exactly once to an idempotent recording sender."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.helpers.crash_child import SCOPES

ROOT = Path(__file__).resolve().parents[2]


def _child(data: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.crash_child", str(data), *extra],
        cwd=str(ROOT),
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _acks(output: str) -> list[tuple[str, int, str]]:
    acks = []
    for line in output.split("\n")[:-1]:  # a line cut by the kill has no newline: it was not acknowledged to us
        parts = line.split()
        if len(parts) == 4 and parts[0] == "ack":
            acks.append((parts[1], int(parts[2]), parts[3]))
    return acks


def _first_ack(proc: subprocess.Popen[str], timeout: float = 120.0) -> str:
    """What the child printed up to and including its first ``ack`` line."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"the child exited before producing (code {proc.poll()})")
        seen.append(line)
        if line.startswith("ack "):
            return "".join(seen)
    raise AssertionError("the child produced nothing in time")


@pytest.mark.slow
async def test_sigkill_at_random_moments_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data = tmp_path / "data"
    rng = random.Random(20261129)
    acked: list[tuple[str, int, str]] = []
    kills = 0
    while kills < 20:
        proc = _child(data)
        started = time.monotonic()
        # wait until it is producing (its first acknowledgement: start-up time varies with the machine's load),
        # then kill it at a random moment
        first = await asyncio.to_thread(_first_ack, proc)
        await asyncio.sleep(rng.random() * 0.6)
        proc.send_signal(signal.SIGKILL)
        out, _ = await asyncio.to_thread(proc.communicate)
        assert proc.returncode == -signal.SIGKILL, f"child ended by itself after {time.monotonic() - started:.1f}s"
        acked.extend(_acks(first + out))
        kills += 1
    assert len(acked) > 100, "the children acknowledged too little to prove anything"

    drain = _child(data, "--drain")
    out, _ = await asyncio.to_thread(drain.communicate, timeout=120)
    assert drain.returncode == 0 and "drained" in out

    store = SqliteLogStore(data, topics=("rec",))
    try:
        for scope in SCOPES:
            entries = await store.read(scope)
            seqs = [e.seq for e in entries]
            assert seqs == list(range(1, len(seqs) + 1)), f"{scope}: seqs are not gapless"
            by_seq = {e.seq: e.id for e in entries}
            for s, seq, entry_id in acked:
                if s == scope:
                    assert by_seq.get(seq) == entry_id, f"acknowledged {scope} #{seq} is missing or different"
            report = await store.verify(scope)
            assert report.ok, report
            effects = sqlite3.connect(data / "effects.db")
            delivered = dict(effects.execute("SELECT seq, id FROM effects WHERE scope = ?", (scope,)).fetchall())
            effects.close()
            assert delivered == by_seq, f"{scope}: the sender's effects differ from the log"
            summary = await store.outbox_summary(scope)
            assert not summary.pending and not summary.parked
    finally:
        await store.close()
