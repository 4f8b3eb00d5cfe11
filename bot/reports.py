"""Exporting post-incident reports: read a scope's log (+ linked scopes + chain verification), build, record.

- ``render_report(store, scope, fmt, templates=…)`` — the bytes and their sha256; a pure read (the REST API uses
  it). ``templates`` is the runtime's ``ReportTemplates`` (``report_templates(config)``: the shipped templates,
  overridden by name from ``[reports] templates_dir``), compiled once per process.
- ``record_export(store, scope, fmt, body, destination=…)`` — the ``report_exported`` entry, appended by the CLI
  once it has written the bytes (never before: an entry must not claim a file that was not written).
- ``export_to_slack(rt, scope, fmt, actor)`` — the Slack export hook: stashes the bytes, records the export; the
  Slack sender uploads them into the thread (an outbox effect, so a crash delays the upload but never doubles it).

Idempotency: a ``report_exported`` entry's key is ``report:<format>:<sha256>:<destination>``, so exporting the
same bytes to the same place again appends nothing (the log does not grow with repeated exports), while new bytes
(the log moved on) or a new destination are recorded. The body never depends on ``report_exported`` entries, so
two exports in a row give the same bytes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from decklog.bot.config import DecklogConfig
from decklog.bot.settings import SettingsError
from decklog.core.entries import Actor, NewEntry, ReportExported, ScopeLinked
from decklog.core.errors import InvalidInput, NotFound
from decklog.core.ids import ScopeId
from decklog.core.reports import (
    Format,
    ReportTemplateError,
    ReportTemplates,
    ScopeLog,
    build_report,
    digest,
    filename,
    parse_format,
    render,
)
from decklog.core.store.ports import LogStore

if TYPE_CHECKING:
    from decklog.bot.runtime import Runtime

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


def report_templates(config: DecklogConfig) -> ReportTemplates:
    """The report templates ``config`` asks for; a ``templates_dir`` that is not a directory stops start-up."""
    if not config.reports.templates_dir:
        return ReportTemplates()
    where = Path(config.reports.templates_dir).expanduser()
    if not where.is_absolute() and config.path:
        where = Path(config.path).parent / where
    try:
        return ReportTemplates(where)
    except ReportTemplateError as exc:
        raise SettingsError(f"DECKLOG_CONFIG: {config.path}: reports.templates_dir: {exc}") from None


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


async def export_to_slack(rt: Runtime, scope: str, fmt: str, actor: Actor) -> str:
    """Record an export to the scope's Slack thread; the Slack sender uploads it. Returns the reply to show."""
    from decklog.adapters.slack.sender import REPORT_STASH  # here, so that the CLI's export does not load slack_sdk

    parsed = parse_format(fmt)
    scope = str(ScopeId.parse(scope))
    state = await rt.store.get_state(scope)
    if state.thread is None:
        return (
            f"`{scope}` has no Slack thread yet, so there is nowhere to upload its report; "
            f"`decklog export {scope} --format {parsed}` writes it to a file."
        )
    body, sha, _ = await render_report(rt.store, scope, parsed, templates=rt.reports)
    name = filename(scope, parsed)
    stash: dict[str, Any] = {
        "filename": name,
        "title": f"Post-incident report — {state.title or scope} ({parsed})",
        "comment": f":page_facing_up: Post-incident report of `{scope}` ({parsed}, {len(body)} bytes) — sha256 `{sha}`",
        "content": body.decode("utf-8"),
    }
    # The bytes first, then the entry that asks for the upload: a crash in between leaves an unused stash only.
    await rt.store.memo_put(scope, REPORT_STASH, sha, stash)
    entry = NewEntry.make(
        "report_exported",
        actor,
        ReportExported(format=parsed, sha256=sha, bytes=len(body), destination="slack"),
        idempotency_key=export_key(parsed, sha, "slack"),
    )
    result = await rt.store.append(scope, [entry])
    if result.duplicate:
        return f"This {parsed} report is already in the thread (sha256 `{sha}`): nothing changed since it was exported."
    return f":page_facing_up: Uploading the {parsed} report to the thread — sha256 `{sha}`."


class SlackExport:
    """The Slack export port (``/incident export``, ``@decklog export``, the header's Export button)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    async def __call__(self, *, scope: str, fmt: str, actor: Actor, key: str) -> str:
        return await export_to_slack(self.rt, scope, fmt, actor)
