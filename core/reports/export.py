"""Exporting post-incident reports: read a scope's log (+ linked scopes + chain verification), build, record.

- ``render_report(store, scope, fmt, templates=…)`` — the bytes and their sha256; a pure read (the REST API uses
  it). ``templates`` is the process's ``ReportTemplates`` (the shipped templates, overridden by name from
  ``[reports] templates_dir``), compiled once per process.
- ``record_export(store, scope, fmt, body, destination=…)`` — the ``report_exported`` entry, appended by the CLI
  once it has written the bytes (never before: an entry must not claim a file that was not written).

Exporting to a Slack thread is the Slack adapter's (adapters/slack/export.py): it stashes the bytes and records the
export under the same key, and the Slack sender uploads them.

Idempotency: a ``report_exported`` entry's key is ``report:<format>:<sha256>:<destination>``, so exporting the
same bytes to the same place again appends nothing (the log does not grow with repeated exports), while new bytes
(the log moved on) or a new destination are recorded. The body never depends on ``report_exported`` entries, so
two exports in a row give the same bytes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from decklog.core.entries import Actor, NewEntry, ReportExported, ScopeLinked
from decklog.core.errors import InvalidInput, NotFound
from decklog.core.ids import ScopeId
from decklog.core.reports import Format, ReportTemplates, ScopeLog, build_report, digest, parse_format, render
from decklog.core.store.ports import LogStore

# Destinations that are not file paths.
NAMED_DESTINATIONS = ("stdout", "slack")


async def read_logs(store: LogStore, scope: str) -> tuple[ScopeLog, list[ScopeLog]]:
    """A scope's entries and verification, and those of every scope it links to (missing ones marked)."""
    scope = str(ScopeId.parse(scope))
    entries = tuple(await store.read(scope))
    if not entries:
        raise NotFound(f"no such scope: {scope}")
    main = ScopeLog(scope, entries, await store.verify(scope))
    linked: list[ScopeLog] = []
    seen: set[str] = set()
    for e in entries:
        if not isinstance(e.payload, ScopeLinked) or e.payload.scope in seen:
            continue
        other = e.payload.scope
        seen.add(other)
        try:
            linked.append(ScopeLog(other, tuple(await store.read(other)), await store.verify(other)))
        except (NotFound, InvalidInput):
            linked.append(ScopeLog(other, found=False))
    return main, linked


async def render_report(
    store: LogStore, scope: str, fmt: str, *, templates: ReportTemplates | None = None
) -> tuple[bytes, str, Format]:
    """The report's bytes, their sha256 and the parsed format. Reads only: nothing is appended.

    A broken operator template raises ``ReportTemplateError`` naming the template (nothing is recorded)."""
    parsed = parse_format(fmt)
    main, linked = await read_logs(store, scope)
    body = render(build_report(main, linked), parsed, templates)
    return body, digest(body), parsed


def export_key(fmt: str, sha256: str, destination: str) -> str:
    """The idempotency key of a ``report_exported`` entry: one entry per (format, bytes, destination)."""
    where = destination
    if len(where) > 120 or any(c.isspace() for c in where):
        where = "sha256:" + hashlib.sha256(destination.encode("utf-8")).hexdigest()[:32]
    return f"report:{fmt}:{sha256}:{where}"


def normalize_destination(destination: str) -> str:
    """``stdout`` / ``slack`` as they are; anything else is a file path, recorded absolute."""
    if destination in NAMED_DESTINATIONS or "://" in destination:
        return destination
    return str(Path(destination).expanduser().resolve())


async def record_export(
    store: LogStore, scope: str, fmt: Format, body: bytes, *, destination: str, actor: Actor | None = None
) -> bool:
    """Append ``report_exported`` for ``body`` sent to ``destination``; False when it was already recorded."""
    where = normalize_destination(destination)
    sha = digest(body)
    entry = NewEntry.make(
        "report_exported",
        actor or Actor.system("export"),
        ReportExported(format=fmt, sha256=sha, bytes=len(body), destination=where),
        idempotency_key=export_key(fmt, sha, where),
    )
    result = await store.append(str(ScopeId.parse(scope)), [entry])
    return not result.duplicate
