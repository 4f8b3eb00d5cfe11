"""The reading context every report section shares: the scope's entries (exports dropped), its folded state,
its linked scopes' logs, and how an entry links back to Slack."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from decklog.core.entries import (
    Actor,
    Declared,
    Entry,
    Evidence,
    Message,
    MessageDeleted,
    MessageEdited,
    ScopeLinked,
)
from decklog.core.reports.model_base import Origin
from decklog.core.state import ScopeState, fold_all
from decklog.core.store.ports import VerifyReport

EXCLUDED_KINDS = frozenset({"report_exported"})
# Linked scopes of these kinds have their entries merged into the timeline (a deploy's start and end matter to
# the incident); linked incidents are summarised only: they have reports of their own.
MERGED_KINDS = ("change",)
_SLACK_ARCHIVE = re.compile(r"^(https://[^/?#\s]+/)archives/[A-Z0-9]+/p\d+")


@dataclass(frozen=True)
class ScopeLog:
    """A report's input for one scope: its entries (all of them, in seq order) and its chain verification.

    ``verify`` is None when the chain was not checked; ``found`` is False for a linked scope that is not on disk.
    """

    scope: str
    entries: tuple[Entry, ...] = ()
    verify: VerifyReport | None = None
    found: bool = True


def report_entries(entries: Iterable[Entry]) -> list[Entry]:
    """The entries a report is made of: everything but the bookkeeping of exports."""
    return [e for e in entries if e.kind not in EXCLUDED_KINDS]


def seconds(later: datetime, earlier: datetime) -> float:
    return round((later - earlier).total_seconds(), 3)


def origin(actor: Actor) -> Origin:
    return actor.type


def http_url(url: str) -> str:
    """``url`` when it is an http(s) URL, else empty: recorded text never becomes a ``javascript:`` link."""
    url = url.strip()
    return url if url.startswith(("https://", "http://")) and not any(c.isspace() for c in url) else ""


def message_permalink(thread_permalink: str, channel: str, ts: str, thread_ts: str = "") -> str:
    """A Slack message's permalink, derived from the thread's (same workspace): ``…/archives/C…/p<ts>``.

    Empty unless the thread permalink has Slack's ``/archives/`` form and the message has a channel and a ts.
    """
    match = _SLACK_ARCHIVE.match(thread_permalink)
    if match is None or not channel or not re.fullmatch(r"\d+\.\d+", ts):
        return ""
    link = f"{match.group(1)}archives/{channel}/p{ts.replace('.', '')}"
    if thread_ts and thread_ts != ts and re.fullmatch(r"\d+\.\d+", thread_ts):
        link += f"?thread_ts={thread_ts}&cid={channel}"
    return link


class Source:
    """One report's input, read once: every section takes it and returns its part of the report."""

    def __init__(self, main: ScopeLog, linked: dict[str, ScopeLog]) -> None:
        self.main = main
        self.entries = report_entries(main.entries)
        self.linked_logs = linked
        self.state: ScopeState = fold_all(main.scope, self.entries)
        self.thread_permalink = http_url(self.state.thread.permalink) if self.state.thread else ""
        self.declared: Entry | None = next((e for e in self.entries if isinstance(e.payload, Declared)), None)
        self.origin_at = self.declared.at if self.declared else (self.entries[0].at if self.entries else None)

    def offset(self, at: datetime) -> float | None:
        return seconds(at, self.origin_at) if self.origin_at is not None else None

    def link_for(self, entry: Entry, thread_permalink: str | None = None) -> str:
        """The entry's own Slack permalink where recorded (or derivable), else its thread's."""
        thread = self.thread_permalink if thread_permalink is None else thread_permalink
        p = entry.payload
        if isinstance(p, Message | Evidence) and http_url(p.permalink):
            return http_url(p.permalink)
        if isinstance(p, Message | Evidence | MessageEdited | MessageDeleted):
            derived = message_permalink(thread, p.channel, p.ts, getattr(p, "thread_ts", ""))
            if derived:
                return derived
        return thread

    def links(self) -> dict[str, tuple[Entry, ScopeLinked]]:
        links: dict[str, tuple[Entry, ScopeLinked]] = {}
        for e in self.entries:
            if isinstance(e.payload, ScopeLinked) and e.payload.scope not in links:
                links[e.payload.scope] = (e, e.payload)
        return links

    def merged_scopes(self) -> list[str]:
        return [
            scope
            for scope in self.links()
            if scope in self.linked_logs and self.linked_logs[scope].found and scope.split("/", 1)[0] in MERGED_KINDS
        ]
