"""Formatting shared by the Markdown and HTML renderings: times, durations, money, actors, hashes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from decklog.core.clock import parse_iso
from decklog.core.entries import Actor

STATUS_WORDS = {
    "waiting_for_approval": "waiting for approval",
    "abandon_uncertain": "abandoned as uncertain",
    "not_applied": "not applied",
    "first_human_response": "first human response",
}


def words(value: str) -> str:
    """A status or kind as words: ``waiting_for_approval`` → ``waiting for approval``."""
    return STATUS_WORDS.get(value, value.replace("_", " "))


def when(at: str | None) -> str:
    """``2026-09-19T03:12:00.000000Z`` → ``2026-09-19 03:12:00 UTC`` (``—`` when unknown)."""
    if not at:
        return "—"
    return parse_iso(at).strftime("%Y-%m-%d %H:%M:%S UTC")


def clock(at: str) -> str:
    """The time of day, UTC: ``03:12:00``."""
    return parse_iso(at).strftime("%H:%M:%S")


def day(at: str) -> str:
    return parse_iso(at).strftime("%Y-%m-%d")


def duration(seconds: float | None) -> str:
    """``3725`` → ``1h 02m 05s``; ``42.5`` → ``42s``; None → ``—``."""
    if seconds is None:
        return "—"
    sign = "-" if seconds < 0 else ""
    total = int(abs(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{sign}{days}d {hours:02d}h {minutes:02d}m"
    if hours:
        return f"{sign}{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{sign}{minutes}m {secs:02d}s"
    return f"{sign}{secs}s"


def offset(seconds: float | None) -> str:
    """Time since the declaration: ``T+4m 05s`` (``T-12m 00s`` for what happened before it)."""
    if seconds is None:
        return ""
    return f"T-{duration(-seconds)}" if seconds < 0 else f"T+{duration(seconds)}"


def usd(amount: float) -> str:
    return f"${amount:.4f}"


def who(actor: Actor | None) -> str:
    if actor is None:
        return "—"
    label = actor.label()
    return label if label == actor.id else f"{label} ({actor.id})"


def short(digest: str, n: int = 12) -> str:
    """The first ``n`` hex digits of a digest, without an ``algorithm:`` prefix (``—`` when empty)."""
    return digest.rpartition(":")[2][:n] if digest else "—"


def names(participants: Iterable[tuple[str, str]]) -> dict[str, str]:
    """id → label, first one wins (participants come humans first): to show approvers by name."""
    out: dict[str, str] = {}
    for ident, label in participants:
        out.setdefault(ident, label if label == ident else f"{label} ({ident})")
    return out


def severity(value: int | None) -> str:
    return f"SEV{value}" if value else "SEV?"


def check(result: Mapping[str, Any]) -> str:
    """A safety condition as evaluated: ``deploy is the latest: ok (r2026-09-19-4)``."""
    name = str(result.get("name") or result.get("condition") or "condition")
    ok = result.get("ok")
    verdict = "ok" if ok is True else ("FAILED" if ok is False else "unknown")
    detail = str(result.get("detail") or "")
    return f"{name}: {verdict}" + (f" ({detail})" if detail else "")


def participant_names(participants: Iterable[Any]) -> dict[str, str]:
    """``names`` over a report's participants (``ParticipantLine``): id → label."""
    return names((p.actor.id, p.actor.label()) for p in participants)


def approver(approval: Any) -> str:
    """Who decided an approval: their name when recorded, else their id."""
    return str(approval.approver_name or approval.approver)


def lookup(key: str, table: Mapping[str, str]) -> str:
    """``table[key]``, or ``key`` itself when the table does not know it."""
    return table.get(key, key)


MTTA_FROM = {
    "page": "from the first page to the first acknowledgement after it",
    "declaration": "from the declaration to the first human response",
}


def mtta_line(summary: Any) -> str:
    """The report's MTTA, in the words and the rounding insights uses (``duration``: whole seconds cut), saying
    which MTTA it is: ``MTTA 1m 35s, from the first page to the first acknowledgement after it.``"""
    value = duration(summary.mtta_s) if summary.mtta_s is not None else "not reached"
    return f"MTTA {value}, {MTTA_FROM[summary.mtta_from]}."
