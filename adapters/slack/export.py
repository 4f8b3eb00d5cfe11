"""Exporting a post-incident report into the scope's Slack thread (``/incident export``, ``@decklog export``, the
header's Export button): the bytes are stashed in a memo, then a ``report_exported`` entry asks for the upload, which
the Slack sender makes (an outbox effect: a crash delays the upload but never doubles it). The report itself and
the export's idempotency key are core's (core/reports/export.py)."""

from __future__ import annotations

from typing import Any

from decklog.adapters.slack.sender import REPORT_STASH
from decklog.core.entries import Actor, NewEntry, ReportExported
from decklog.core.ids import ScopeId
from decklog.core.reports import ReportTemplates, filename, parse_format
from decklog.core.reports.export import export_key, render_report
from decklog.core.store.ports import LogStore


async def export_to_slack(
    store: LogStore, scope: str, fmt: str, actor: Actor, *, templates: ReportTemplates | None = None
) -> str:
    """Record an export to the scope's Slack thread; the Slack sender uploads it. Returns the reply to show."""
    parsed = parse_format(fmt)
    scope = str(ScopeId.parse(scope))
    state = await store.get_state(scope)
    if state.thread is None:
        return (
            f"`{scope}` has no Slack thread yet, so there is nowhere to upload its report; "
            f"`decklog export {scope} --format {parsed}` writes it to a file."
        )
    body, sha, _ = await render_report(store, scope, parsed, templates=templates)
    name = filename(scope, parsed)
    stash: dict[str, Any] = {
        "filename": name,
        "title": f"Post-incident report — {state.title or scope} ({parsed})",
        "comment": f":page_facing_up: Post-incident report of `{scope}` ({parsed}, {len(body)} bytes) — sha256 `{sha}`",
        "content": body.decode("utf-8"),
    }
    # The bytes first, then the entry that asks for the upload: a crash in between leaves an unused stash only.
    await store.memo_put(scope, REPORT_STASH, sha, stash)
    entry = NewEntry.make(
        "report_exported",
        actor,
        ReportExported(format=parsed, sha256=sha, bytes=len(body), destination="slack"),
        idempotency_key=export_key(parsed, sha, "slack"),
    )
    result = await store.append(scope, [entry])
    if result.duplicate:
        return f"This {parsed} report is already in the thread (sha256 `{sha}`): nothing changed since it was exported."
    return f":page_facing_up: Uploading the {parsed} report to the thread — sha256 `{sha}`."


class SlackExport:
    """The Slack export port (``SlackPorts.export``)."""

    def __init__(self, store: LogStore, templates: ReportTemplates | None = None) -> None:
        self.store = store
        self.templates = templates

    async def __call__(self, *, scope: str, fmt: str, actor: Actor, key: str) -> str:
        return await export_to_slack(self.store, scope, fmt, actor, templates=self.templates)
