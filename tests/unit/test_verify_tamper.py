"""``verify`` catches a scope file altered behind decklog's back, and names the first seq at fault.

A scope of 20 entries is written through the store and the store is closed; the file is then edited with raw
sqlite3, the way someone with shell access could, and a fresh store verifies it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from decklog.core.entries import Actor, NewEntry, chain_hash
from decklog.core.ids import ScopeId
from decklog.core.store.ports import VerifyReport
from decklog.core.store.sqlite.log_store import SqliteLogStore

SCOPE = "incident/payments-5xx"
ALICE = Actor.human("U0ALICE", "alice")
LAST = 20
CONTENT = ("id", "kind", "at", "actor", "payload", "refs", "idempotency_key", "prev_hash", "hash")


@pytest.fixture
async def scope_file(tmp_path: Path) -> Path:
    store = SqliteLogStore(tmp_path, topics=("index", "slack"))
    try:
        await store.append(SCOPE, [NewEntry.make("declared", ALICE, {"title": "Payments 5xx"})], create=True)
        for seq in range(2, LAST + 1):
            kind, payload = "message", dict[str, object](text=f"note {seq}")
            if seq % 5 == 0:
                kind, payload = "severity_changed", {"severity": 1 + seq % 4}
            elif seq % 7 == 0:
                kind, payload = "observation", {"text": f"alert {seq}", "fingerprint": f"fp{seq % 3}"}
            entry = NewEntry.make(kind, ALICE, payload, refs=[seq - 1], idempotency_key=f"key-{seq}")
            await store.append(SCOPE, [entry])
        assert (await store.verify(SCOPE)).ok
    finally:
        await store.close()
    return store.path_for(ScopeId.parse(SCOPE))


def tamper(path: Path, *statements: str) -> None:
    with sqlite3.connect(path) as raw:
        for sql in statements:
            raw.execute(sql)


def row(path: Path, seq: int) -> tuple[str, ...]:
    with sqlite3.connect(path) as raw:
        return tuple(raw.execute(f"SELECT {', '.join(CONTENT)} FROM entries WHERE seq = ?", (seq,)).fetchone())


async def verify(path: Path) -> VerifyReport:
    store = SqliteLogStore(path.parent.parent)
    try:
        return await store.verify(SCOPE)
    finally:
        await store.close()


def assert_bad_at(report: VerifyReport, seq: int) -> None:
    assert not report.ok, report
    assert report.first_bad_seq == seq, report
    assert report.reason


async def test_an_untouched_file_verifies(scope_file: Path) -> None:
    report = await verify(scope_file)
    assert report.ok and report.entries == LAST and report.first_bad_seq is None


async def test_an_edited_payload_is_named(scope_file: Path) -> None:
    tamper(scope_file, "UPDATE entries SET payload = replace(payload, 'note 8', 'note 8 (edited)') WHERE seq = 8")
    assert "edited" in row(scope_file, 8)[CONTENT.index("payload")]
    assert_bad_at(await verify(scope_file), 8)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("kind", "'decision'"),
        ("at", "'2020-01-01T00:00:00.000000Z'"),
        ("actor", """'{"id":"U0MALLORY","name":"mallory","type":"human"}'"""),
        ("refs", "'[]'"),
        ("idempotency_key", "NULL"),
        ("id", "'e000000000000ffffffffff'"),
    ],
)
async def test_any_edited_column_is_named(scope_file: Path, column: str, value: str) -> None:
    tamper(scope_file, f"UPDATE entries SET {column} = {value} WHERE seq = 11")
    assert_bad_at(await verify(scope_file), 11)


async def test_an_edit_with_a_recomputed_hash_is_caught_where_the_chain_breaks(scope_file: Path) -> None:
    """A forger who rehashes entry 8 makes 8 self-consistent; the link to 9 still breaks, and 9 is named.

    (Both 8 and 9 are then self-consistent: the chain can only say that the link between them broke.)
    """
    columns = dict(zip(CONTENT, row(scope_file, 8), strict=True))
    payload = columns["payload"].replace("note 8", "forged")
    digest = chain_hash(
        prev_hash=columns["prev_hash"],
        seq=8,
        entry_id=columns["id"],
        kind=columns["kind"],
        at=columns["at"],
        actor_json=columns["actor"],
        payload=payload,
        refs_json=columns["refs"],
        idempotency_key=columns["idempotency_key"],
    )
    with sqlite3.connect(scope_file) as raw:
        raw.execute("UPDATE entries SET payload = ?, hash = ? WHERE seq = 8", (payload, digest))
    report = await verify(scope_file)
    assert_bad_at(report, 9)
    assert "8" in report.reason


async def test_a_deleted_entry_is_named(scope_file: Path) -> None:
    tamper(scope_file, "DELETE FROM entries WHERE seq = 9")
    assert_bad_at(await verify(scope_file), 9)


async def test_a_deleted_first_entry_is_named(scope_file: Path) -> None:
    tamper(scope_file, "DELETE FROM entries WHERE seq = 1")
    assert_bad_at(await verify(scope_file), 1)


async def test_swapped_entries_name_the_first_swapped_seq(scope_file: Path) -> None:
    sixth, thirteenth = row(scope_file, 6), row(scope_file, 13)
    assignments = ", ".join(f"{c} = ?" for c in CONTENT)
    with sqlite3.connect(scope_file) as raw:
        raw.execute("UPDATE entries SET id = id || '~', idempotency_key = idempotency_key || '~' WHERE seq IN (6, 13)")
        raw.execute(f"UPDATE entries SET {assignments} WHERE seq = 6", thirteenth)
        raw.execute(f"UPDATE entries SET {assignments} WHERE seq = 13", sixth)
    assert row(scope_file, 6) == thirteenth
    assert_bad_at(await verify(scope_file), 6)


async def test_renumbered_entries_name_the_first_moved_seq(scope_file: Path) -> None:
    tamper(
        scope_file,
        "UPDATE entries SET seq = -1 WHERE seq = 4",
        "UPDATE entries SET seq = 4 WHERE seq = 15",
        "UPDATE entries SET seq = 15 WHERE seq = -1",
    )
    assert_bad_at(await verify(scope_file), 4)


async def test_an_edited_state_body_is_caught(scope_file: Path) -> None:
    with sqlite3.connect(scope_file) as raw:
        body = json.loads(raw.execute("SELECT body FROM state WHERE id = 1").fetchone()[0])
        body["severity"] = 4 if body["severity"] != 4 else 3
        raw.execute("UPDATE state SET body = ? WHERE id = 1", (json.dumps(body),))
    report = await verify(scope_file)
    assert_bad_at(report, LAST)  # the stored state claims to be the fold up to the last entry, and is not
    assert "severity" in report.reason


@pytest.mark.parametrize("body", ["not json", "[]", "null", "{}"])
async def test_a_garbled_state_body_is_reported_not_raised(scope_file: Path, body: str) -> None:
    tamper(scope_file, f"UPDATE state SET body = '{body}' WHERE id = 1")
    assert_bad_at(await verify(scope_file), LAST)


async def test_a_truncated_tail_is_named(scope_file: Path) -> None:
    tamper(scope_file, f"DELETE FROM entries WHERE seq = {LAST}")
    assert_bad_at(await verify(scope_file), LAST)


async def test_a_truncated_tail_of_several_entries_names_the_first_missing(scope_file: Path) -> None:
    tamper(scope_file, "DELETE FROM entries WHERE seq > 16")
    assert_bad_at(await verify(scope_file), 17)


async def test_an_appended_entry_the_state_does_not_know_is_named(scope_file: Path) -> None:
    with sqlite3.connect(scope_file) as raw:
        last = raw.execute(f"SELECT {', '.join(CONTENT)} FROM entries WHERE seq = ?", (LAST,)).fetchone()
        forged = dict(zip(CONTENT, last, strict=True))
        forged.update(id="e-forged", idempotency_key=None, prev_hash=forged["hash"])
        raw.execute(
            f"INSERT INTO entries (seq, {', '.join(CONTENT)}) VALUES (?, {', '.join('?' * len(CONTENT))})",
            (LAST + 1, *forged.values()),
        )
    assert_bad_at(await verify(scope_file), LAST + 1)


async def test_a_deleted_state_row_is_caught(scope_file: Path) -> None:
    tamper(scope_file, "DELETE FROM state")
    assert_bad_at(await verify(scope_file), 1)


async def test_an_emptied_log_with_its_state_left_is_caught(scope_file: Path) -> None:
    tamper(scope_file, "DELETE FROM entries")
    assert_bad_at(await verify(scope_file), 1)
