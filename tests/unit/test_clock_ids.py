"""The two formats every append writes: ``iso`` times and entry ids (decision 134 made both cheaper)."""

from __future__ import annotations

import os
import random
import re
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from decklog.core.clock import iso, parse_iso
from decklog.core.store.staging import new_entry_id


def _strftime(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_iso_is_the_strftime_format_for_any_time_and_zone() -> None:
    rng = random.Random(7)
    zones = [UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-9, minutes=-30))]
    cases = [
        datetime(2026, 12, 6, 18, 0, 0, 0, tzinfo=UTC),  # no microseconds: still six digits
        datetime(1000, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        datetime(999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),  # below year 1000: the strftime path
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ]
    for _ in range(2000):
        base = datetime(2000, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.uniform(0, 40 * 365 * 86400))
        cases.append(base.astimezone(rng.choice(zones)))
    for at in cases:
        assert iso(at) == _strftime(at), at
        if at.year >= 1000:
            assert parse_iso(iso(at)) == at


def test_iso_of_a_parsed_time_takes_the_fast_path_and_round_trips() -> None:
    text = "2026-12-06T03:10:00.000042Z"
    at = parse_iso(text)
    assert at.tzinfo is UTC
    assert iso(at) == text


def test_entry_ids_keep_their_shape_order_and_uniqueness() -> None:
    before = int(time.time() * 1000)
    ids = [new_entry_id() for _ in range(20_000)]
    after = int(time.time() * 1000)
    assert all(re.fullmatch(r"e[0-9a-f]{22}", i) for i in ids)
    assert len(set(ids)) == len(ids)
    stamps = [int(i[1:13], 16) for i in ids]
    assert stamps == sorted(stamps) and before <= stamps[0] and stamps[-1] <= after


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_the_stores_id_bits_differ_in_a_forked_child() -> None:
    """Entry ids' random part comes from ``random.getrandbits``, which a forked child reseeds: a child forked from
    a running store does not repeat the parent's ids within the same millisecond."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next draws, then leave without running the parent's clean-ups
        os.close(read)
        os.write(write, ",".join(str(random.getrandbits(40)) for _ in range(8)).encode())
        os._exit(0)
    os.close(write)
    mine = [random.getrandbits(40) for _ in range(8)]
    with os.fdopen(read) as pipe:
        theirs = [int(x) for x in pipe.read().split(",")]
    os.waitpid(pid, 0)
    assert set(mine).isdisjoint(theirs)
