"""Past incidents like the one at hand, and what each one teaches: the cause people confirmed, and the actions
that fixed it.

**Matching.** The incident's signature is its alerting services, its alert names (an alert's ``alertname`` label,
else its title) and each (service, alert name) pair. Candidates are the incidents the index finds by the alerts'
words (full-text) and the latest incidents on each alerting service; forks and the incident itself are left out.
A candidate's ``similarity`` is the share of the signature it shares, with the word overlap of the alert titles
counting as one more element: the same alert on the same service scores high, the same alert name on another
service or only similar words score low. ``matched`` names what matched (``service``, ``alert``, ``same signature``
— the same alert on the same service — and ``text``).

**Lessons**, from the past incident's own log:

- its cause: the last hypothesis that people confirmed (a ``finding_answer`` "confirmed", not taken back by a later
  "ruled_out" of the same finding) — its subject (a service or a change) and text; else the summary of its
  resolution (the ``status_changed`` to resolved that carries one);
- its fixes: the actions that applied (an ``action_result`` "applied") and that a verification then verified.

Everything here only reads: the index and the past incidents' logs (a bounded number of each).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from decklog.core.entries import (
    ActionResult,
    ActionStarted,
    Entry,
    FindingAnswer,
    Hypothesis,
    Observation,
    StatusChanged,
    Verification,
)
from decklog.core.errors import NotFound
from decklog.core.index.text import search_words
from decklog.core.state import AlertState, ScopeState
from decklog.core.store.ports import IndexPort
from decklog.core.views.related import target_of

CANDIDATES = 12  # past incidents looked at (their logs are read)
ALERTS_READ = 5  # alerts of one incident whose first observation is read for its name
LESSON_ENTRIES = 400  # the newest entries of the kinds below read from one past incident
LESSON_KINDS = ("hypothesis", "finding_answer", "status_changed", "action_started", "action_result", "verification")
_WORD = re.compile(r"[a-z0-9][a-z0-9_.-]*")


class PastLogs(Protocol):
    """The reads of other scopes' logs that matching and lessons need (a ``LogStore`` is one)."""

    async def get_state(self, scope: str) -> ScopeState: ...

    async def read_seqs(self, scope: str, seqs: Sequence[int]) -> list[Entry]: ...

    async def read_last(self, scope: str, *, limit: int, kinds: Sequence[str] = ()) -> list[Entry]: ...


@dataclass(frozen=True)
class Fix:
    """An action that applied in a past incident and was verified to have worked."""

    action: str
    target: str  # its params, ``key=value`` sorted (core/views/related.py target_of)
    params: dict[str, Any]
    run_id: str
    seq: int  # the verification's entry

    def describe(self) -> str:
        return f"{self.action}({self.target})" if self.target else self.action


@dataclass(frozen=True)
class Lesson:
    """What a past incident's log says caused it and fixed it."""

    cause: str = ""  # the confirmed hypothesis' text, or the resolution's summary
    subject: str = ""  # what the confirmed hypothesis named: a service or a change scope ("" from a resolution)
    cause_from: str = ""  # "confirmed" | "resolution"
    cause_seq: int = 0
    fixes: tuple[Fix, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.cause and not self.fixes


@dataclass
class PastIncident:
    scope: str
    title: str
    services: tuple[str, ...]
    status: str
    similarity: float  # 0..1: the share of the incident's signature this one shares
    matched: list[str] = field(default_factory=list)
    pair_services: tuple[str, ...] = ()  # the services on which it had the same alert (the same signature)
    lesson: Lesson = field(default_factory=Lesson)
    cause_services: tuple[str, ...] = ()  # the services its cause or its fixes name

    def names(self, service: str) -> bool:
        """Whether its cause or a fix names ``service`` (a resolution's summary: as a word of its text)."""
        if service in self.cause_services:
            return True
        return self.lesson.cause_from == "resolution" and _mentions(self.lesson.cause, service)

    def summary(self) -> str:
        """``incident/x (same signature, 80 %): the cause was …; fixed by restart(service=cart) (verified)``."""
        head = f"{self.scope} ({', '.join(self.matched)}; similarity {self.similarity:.0%})"
        parts = []
        if self.lesson.cause:
            how = "confirmed" if self.lesson.cause_from == "confirmed" else "at its resolution"
            parts.append(f"the cause {how}: {self.lesson.cause[:160]}")
        if self.lesson.fixes:
            parts.append("fixed by " + ", ".join(f.describe() for f in self.lesson.fixes[:3]) + " (verified)")
        return head + (": " + "; ".join(parts) if parts else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "title": self.title,
            "services": list(self.services),
            "status": self.status,
            "similarity": round(self.similarity, 2),
            "matched": self.matched,
            "cause": self.lesson.cause,
            "cause_subject": self.lesson.subject,
            "cause_from": self.lesson.cause_from,
            "cause_seq": self.lesson.cause_seq,
            "cause_services": list(self.cause_services),
            "fixed_by": [
                {"action": f.action, "target": f.target, "run_id": f.run_id, "verified_seq": f.seq}
                for f in self.lesson.fixes
            ],
        }


@dataclass(frozen=True)
class Signature:
    services: frozenset[str]
    alerts: frozenset[str]  # alert names, lower case
    pairs: frozenset[tuple[str, str]]  # (service, alert name)
    words: frozenset[str]  # the words of the alert titles

    @property
    def size(self) -> int:
        return len(self.services) + len(self.alerts) + len(self.pairs) + (1 if self.words else 0)

    def query(self) -> str:
        return " ".join(dict.fromkeys([*sorted(self.alerts), *sorted(self.services), *sorted(self.words)]))[:200]


def _mentions(text: str, name: str) -> bool:
    return bool(name) and re.search(rf"(?<![\w-]){re.escape(name.lower())}(?![\w-])", text.lower()) is not None


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) > 2}


async def _alert_names(logs: PastLogs, state: ScopeState, alerts: Sequence[AlertState]) -> list[tuple[str, str]]:
    """(service, alert name) of ``alerts``: the ``alertname`` label of each alert's first observation, else its
    title."""
    chosen = sorted(alerts, key=lambda a: a.first_seq)[:ALERTS_READ]
    names: dict[int, str] = {}
    seqs = [a.first_seq for a in chosen if a.first_seq]
    if seqs:
        for e in await logs.read_seqs(state.scope, seqs):
            p = e.payload
            if isinstance(p, Observation) and p.labels.get("alertname"):
                names[e.seq] = p.labels["alertname"]
    return [(a.service, (names.get(a.first_seq) or a.title).strip().lower()) for a in chosen]


async def signature(logs: PastLogs, state: ScopeState) -> Signature:
    """The signature of ``state``'s alerts (its firing ones; all of them once resolved)."""
    alerts = state.firing_alerts or list(state.alerts.values())
    named = await _alert_names(logs, state, alerts)
    services = {s for s, _ in named if s} or set(state.services)
    words: set[str] = set()
    for a in alerts[:ALERTS_READ]:
        words |= _words(a.title)
    if not alerts:
        words |= _words(state.title)
    return Signature(
        frozenset(services),
        frozenset(n for _, n in named if n),
        frozenset((s, n) for s, n in named if s and n),
        frozenset(words),
    )


async def similar_incidents(
    logs: PastLogs, index: IndexPort, state: ScopeState, *, limit: int = 5, min_similarity: float = 0.0
) -> list[PastIncident]:
    """The past incidents most like ``state``'s, most similar first, each with its lesson."""
    sig = await signature(logs, state)
    if not sig.size:
        return []
    found: dict[str, bool] = {}  # scope → found by its words
    query = sig.query()
    if search_words(query):
        for hit in await index.search(query, limit=CANDIDATES * 4, exclude_scope=state.scope, scope_kind="incident"):
            if len(found) < CANDIDATES:
                found.setdefault(hit.scope, True)
    for service in sorted(sig.services):
        for row in await index.list_scopes(kind="incident", service=service, limit=CANDIDATES):
            if row.id != state.scope and len(found) < 2 * CANDIDATES:
                found.setdefault(row.id, False)
    out: list[PastIncident] = []
    for scope in list(found)[: 2 * CANDIDATES]:
        past = await _compare(logs, index, sig, scope)
        if past is not None and past.similarity > min_similarity:
            out.append(past)
    out.sort(key=lambda p: (-p.similarity, p.scope))
    for past in out[:limit]:
        past.lesson = await lesson(logs, past.scope)
        past.cause_services = await _cause_services(index, past)
    return out[:limit]


async def _compare(logs: PastLogs, index: IndexPort, sig: Signature, scope: str) -> PastIncident | None:
    try:
        other = await logs.get_state(scope)
    except NotFound:
        return None
    if other.kind != "incident" or other.forked_from or not other.version:
        return None
    named = await _alert_names(logs, other, list(other.alerts.values()))
    services = {s for s, _ in named if s} | set(other.services)
    alerts = {n for _, n in named if n}
    pairs = {(s, n) for s, n in named if s and n}
    words: set[str] = set()
    for a in list(other.alerts.values())[:ALERTS_READ]:
        words |= _words(a.title)
    words |= _words(other.title)
    shared_pairs = sig.pairs & pairs
    shared_services = sig.services & services
    shared_alerts = sig.alerts & alerts
    text = len(sig.words & words) / len(sig.words) if sig.words else 0.0
    similarity = (len(shared_pairs) + len(shared_services) + len(shared_alerts) + text) / sig.size
    matched = []
    if shared_pairs:
        matched.append("same signature")
    if shared_services:
        matched.append("service " + ", ".join(sorted(shared_services)))
    if shared_alerts:
        matched.append("alert " + ", ".join(sorted(shared_alerts)))
    if text:
        matched.append(f"words {text:.0%}")
    if not matched:
        return None
    pair_services = tuple(sorted({svc for svc, _ in shared_pairs}))
    return PastIncident(scope, other.title, other.services, other.status, min(1.0, similarity), matched, pair_services)


async def lesson(logs: PastLogs, scope: str) -> Lesson:
    """The cause people confirmed in ``scope`` (else its resolution's summary) and the verified fixes."""
    entries = await logs.read_last(scope, limit=LESSON_ENTRIES, kinds=LESSON_KINDS)
    by_seq = {e.seq: e for e in entries}
    verdicts: dict[int, tuple[int, str]] = {}  # hypothesis seq → (answer seq, verdict)
    resolution: tuple[int, str] | None = None
    started: dict[str, dict[str, Any]] = {}
    applied: dict[str, tuple[str, int]] = {}
    verified: dict[str, int] = {}
    for e in entries:
        p = e.payload
        if isinstance(p, FindingAnswer) and p.finding_kind == "hypothesis" and p.verdict in ("confirmed", "ruled_out"):
            verdicts[p.finding] = (e.seq, p.verdict)
        elif isinstance(p, StatusChanged) and p.status == "resolved" and p.summary.strip():
            resolution = (e.seq, p.summary.strip())
        elif isinstance(p, ActionStarted):
            started[p.run_id] = dict(p.params)
        elif isinstance(p, ActionResult) and p.outcome == "applied":
            applied[p.run_id] = (p.action, e.seq)
        elif isinstance(p, Verification) and p.outcome == "verified" and p.run_id:
            verified[p.run_id] = e.seq
    confirmed = sorted((answer, seq) for seq, (answer, verdict) in verdicts.items() if verdict == "confirmed")
    cause = subject = cause_from = ""
    cause_seq = 0
    if confirmed:
        seq = confirmed[-1][1]
        entry = by_seq.get(seq) or next(iter(await logs.read_seqs(scope, [seq])), None)
        if entry is not None and isinstance(entry.payload, Hypothesis):
            hyp = entry.payload
            cause, subject, cause_from, cause_seq = hyp.text, hyp.subject or hyp.suspect_scope, "confirmed", seq
    if not cause and resolution is not None:
        cause_seq, cause = resolution
        cause_from = "resolution"
    fixes = tuple(
        Fix(action, target_of(started.get(run, {})), started.get(run, {}), run, verified[run])
        for run, (action, _seq) in applied.items()
        if run in verified
    )
    return Lesson(cause, subject, cause_from, cause_seq, fixes)


async def _cause_services(index: IndexPort, past: PastIncident) -> tuple[str, ...]:
    """The services a past incident's lesson names: its confirmed subject (a change's services), its fixes'
    ``service`` params, and any of its own services its cause's text names."""
    names: list[str] = []
    subject = past.lesson.subject
    if subject.startswith("change/"):
        row = await index.get(subject)
        names += list(row.services) if row is not None else []
    elif subject:
        names.append(subject)
    for fix in past.lesson.fixes:
        service = fix.params.get("service")
        if isinstance(service, str) and service:
            names.append(service)
    if past.lesson.cause_from == "resolution":
        names += [s for s in past.services if _mentions(past.lesson.cause, s)]
    return tuple(dict.fromkeys(names))
