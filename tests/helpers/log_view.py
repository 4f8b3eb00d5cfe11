"""What a data directory and a fake Slack hold, read from outside the server, and the verdict on acked requests.

``read_log`` opens every scope file with plain sqlite3 (the server may be running: WAL readers do not block it).
``judge`` compares what was acknowledged (:class:`Acked`) with the log and with the fake Slack workspace:
every acked declare has one incident and one header, every acked message / pin / click / alert exactly its entry,
every incident in the log one header, no entry posted to Slack twice, and (``drained``) no outbox row pending.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decklog.adapters.local.slack import FakeSlack

from .serve import GENERAL


@dataclass
class Row:
    seq: int
    kind: str
    payload: dict[str, Any]
    key: str | None


@dataclass
class ScopeFile:
    scope: str
    rows: list[Row]
    pending: Counter[str]  # topic → outbox rows neither published nor parked
    parked: Counter[str]
    stuck: list[str] = field(default_factory=list)  # the pending rows, described (for a failure's message)


def read_log(data_dir: Path) -> dict[str, ScopeFile]:
    out: dict[str, ScopeFile] = {}
    for path in sorted((data_dir / "scopes").glob("*.db")):
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            rows = [
                Row(seq, kind, json.loads(payload), key)
                for seq, kind, payload, key in db.execute(
                    "SELECT seq, kind, payload, idempotency_key FROM entries ORDER BY seq"
                )
            ]
            pending = Counter(
                dict(
                    db.execute(
                        "SELECT topic, count(*) FROM outbox WHERE published_at IS NULL AND parked_at IS NULL"
                        " GROUP BY topic"
                    ).fetchall()
                )
            )
            parked = Counter(
                dict(
                    db.execute(
                        "SELECT topic, count(*) FROM outbox WHERE parked_at IS NOT NULL GROUP BY topic"
                    ).fetchall()
                )
            )
            stuck = [
                f"{topic} #{seq} {kind} attempts={attempts} due_in={due - time.time():.1f}s error={error[:120]!r}"
                for topic, seq, kind, attempts, due, error in db.execute(
                    "SELECT o.topic, o.seq, e.kind, o.attempts, o.next_attempt_at, o.last_error FROM outbox o"
                    " JOIN entries e ON e.seq = o.seq WHERE o.published_at IS NULL AND o.parked_at IS NULL"
                    " ORDER BY o.seq LIMIT 5"
                )
            ]
        except sqlite3.OperationalError:  # a file that has no tables yet (being created): no entries
            continue
        finally:
            db.close()
        if not rows:  # a declaration that never committed (killed after its file was put in place): not a scope
            continue
        scope = path.stem.replace("~", "/", 1)
        out[scope] = ScopeFile(scope, rows, pending, parked, [f"{scope} {row}" for row in stuck])
    return out


@dataclass
class Acked:
    """Requests that got a 2xx (or a Socket Mode ack), by what their effect is."""

    declares: list[str] = field(default_factory=list)  # titles
    messages: dict[str, str] = field(default_factory=dict)  # idempotency key → scope
    pins: dict[str, str] = field(default_factory=dict)
    clicks: dict[str, int] = field(default_factory=dict)  # scope → the severity picked on its header
    alerts: list[str] = field(default_factory=list)  # fingerprints of firing alerts

    @property
    def total(self) -> int:
        return len(self.declares) + len(self.messages) + len(self.pins) + len(self.clicks) + len(self.alerts)

    def counts(self) -> dict[str, int]:
        return {
            "declares": len(self.declares),
            "messages": len(self.messages),
            "pins": len(self.pins),
            "clicks": len(self.clicks),
            "alerts": len(self.alerts),
        }


@dataclass
class Verdict:
    lost: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    pending: Counter[str] = field(default_factory=Counter)  # outbox rows still to deliver, by topic
    stuck: list[str] = field(default_factory=list)  # which rows those are
    parked: Counter[str] = field(default_factory=Counter)
    scopes: int = 0
    entries: int = 0

    @property
    def complete(self) -> bool:
        """Every acked effect is there and nothing is left to deliver (duplicates aside)."""
        return not self.lost and not sum(self.pending.values())

    @property
    def ok(self) -> bool:
        return self.complete and not self.duplicates and not sum(self.parked.values())

    def describe(self, limit: int = 15) -> str:
        parts = [f"{self.scopes} scopes, {self.entries} entries"]
        if self.lost:
            parts.append(f"{len(self.lost)} lost: " + "; ".join(self.lost[:limit]))
        if self.duplicates:
            parts.append(f"{len(self.duplicates)} duplicated: " + "; ".join(self.duplicates[:limit]))
        if sum(self.pending.values()):
            parts.append(f"outbox pending {dict(self.pending)}: " + "; ".join(self.stuck[:limit]))
        if sum(self.parked.values()):
            parts.append(f"outbox parked {dict(self.parked)}")
        return " | ".join(parts)


def slack_entry_posts(fake: FakeSlack) -> Counter[tuple[str, str, str]]:
    """Bot messages in the fake workspace by (scope, entry id, key) of their decklog metadata."""
    posts: Counter[tuple[str, str, str]] = Counter()
    for message in fake.workspace.messages.all():
        meta = (message.metadata or {}).get("event_payload") or {}
        if meta.get("entry_id"):
            posts[(str(meta.get("scope")), str(meta["entry_id"]), str(meta.get("key", "")))] += 1
    return posts


def headers_by_scope(fake: FakeSlack, channel: str = GENERAL) -> Counter[str]:
    return Counter(
        str(((m.metadata or {}).get("event_payload") or {}).get("scope"))
        for m in fake.workspace.messages.all(fake.workspace.channel(channel).id)
        if (m.metadata or {}).get("event_type") == "decklog_header"
    )


def _header_posts(fake: FakeSlack, scope: str, channel: str = GENERAL) -> str:
    """The header messages of ``scope`` (when there is more than one: which entry each names, and its ts)."""
    posts = [
        f"{((m.metadata or {}).get('event_payload') or {}).get('entry_id')}@{m.ts}"
        for m in fake.workspace.messages.all(fake.workspace.channel(channel).id)
        if (m.metadata or {}).get("event_type") == "decklog_header"
        and ((m.metadata or {}).get("event_payload") or {}).get("scope") == scope
    ]
    return f" ({', '.join(posts)})" if len(posts) > 1 else ""


def _count(lost: list[str], dups: list[str], what: str, n: int) -> None:
    if n == 0:
        lost.append(what)
    elif n > 1:
        dups.append(f"{what} ×{n}")


def judge(data_dir: Path, fake: FakeSlack, acked: Acked) -> Verdict:
    return judge_log(read_log(data_dir), fake, acked)


def judge_log(log: dict[str, ScopeFile], fake: FakeSlack, acked: Acked) -> Verdict:
    """``judge`` over scopes read from anywhere (a data directory, or a PostgreSQL database: tests/helpers/pg_view.py)."""
    v = Verdict(scopes=len(log), entries=sum(len(f.rows) for f in log.values()))
    incidents = {s: f for s, f in log.items() if s.startswith("incident/")}
    titles = Counter(r.payload.get("title") for f in incidents.values() for r in f.rows if r.kind == "declared")
    keys = Counter(r.key for f in log.values() for r in f.rows if r.key)
    firing = Counter(
        r.payload.get("fingerprint")
        for f in log.values()
        for r in f.rows
        if r.kind == "observation" and r.payload.get("alert_status") == "firing"
    )
    for title in acked.declares:
        _count(v.lost, v.duplicates, f"declare {title!r}", titles[title])
    for key in [*acked.messages, *acked.pins]:
        _count(v.lost, v.duplicates, key, keys[key])
    for scope, severity in acked.clicks.items():
        rows = incidents[scope].rows if scope in incidents else []
        n = sum(1 for r in rows if r.kind == "severity_changed" and r.payload.get("severity") == severity)
        _count(v.lost, v.duplicates, f"{scope} severity {severity} (click)", n)
    for fingerprint in acked.alerts:
        _count(v.lost, v.duplicates, f"alert {fingerprint}", firing[fingerprint])
    headers = headers_by_scope(fake)
    for scope in incidents:
        _count(v.lost, v.duplicates, f"header of {scope}{_header_posts(fake, scope)}", headers[scope])
    for (scope, entry_id, key), n in slack_entry_posts(fake).items():
        if n > 1 and key != "header":
            v.duplicates.append(f"slack post {scope} {entry_id} {key} ×{n}")
    for f in log.values():
        v.pending.update(f.pending)
        v.stuck.extend(f.stuck)
        v.parked.update(f.parked)
    return v


def linked_threads(data_dir: Path) -> dict[str, str]:
    """Incident scope → its thread ts, for incidents whose ``thread_linked`` is committed (the server routes it)."""
    return threads_of(read_log(data_dir))


def threads_of(log: dict[str, ScopeFile]) -> dict[str, str]:
    out: dict[str, str] = {}
    for scope, f in log.items():
        if not scope.startswith("incident/"):
            continue
        if any(r.kind == "resolved" for r in f.rows):
            continue
        for r in f.rows:
            if r.kind == "thread_linked" and r.payload.get("ts"):
                out[scope] = str(r.payload["ts"])
    return out
