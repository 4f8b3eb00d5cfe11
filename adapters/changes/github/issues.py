"""GitHub ``issues`` webhooks → :class:`~core.follow_ups.IssueEvent`: an issue decklog filed as a follow-up was
closed or reopened (payload: https://docs.github.com/en/webhooks/webhook-events-and-payloads#issues).

* ``action`` ← ``action``: ``closed`` and ``reopened`` are read; every other action (``opened``, ``edited``,
  ``labeled``, …) → ``None`` (nothing to record);
* ``url`` ← ``issue.html_url`` (required, http(s)); ``number`` ← ``issue.number`` (required, a positive integer);
* ``body`` ← ``issue.body`` (may be null: it carries decklog's marker when decklog filed the issue);
* ``reason`` ← ``issue.state_reason`` (``completed``, ``not_planned``; absent from older payloads);
* ``by`` ← ``sender.login``; ``changed_at`` ← ``issue.updated_at`` → ``issue.closed_at`` (ISO 8601, UTC);
* ``repository`` ← ``repository.full_name``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from decklog.adapters import payload as f
from decklog.core.clock import iso
from decklog.core.follow_ups import IssueEvent
from decklog.core.signals import PayloadError

ISSUES_EVENT: Final = "issues"
BODY_MAX: Final = 65536  # GitHub caps an issue body at 65536 characters
NUMBER_MAX: Final = 2**53  # JSON's safe integers


def _number(issue: Mapping[str, object]) -> int:
    value = issue.get("number")
    if value is None:
        raise PayloadError("issue.number", "is required")
    if not isinstance(value, int) or isinstance(value, bool):
        raise PayloadError("issue.number", f"expected an integer, got {f.json_type(value)}")
    if not 1 <= value <= NUMBER_MAX:
        raise PayloadError("issue.number", "must be a positive integer")
    return value


def _login(top: Mapping[str, object]) -> str:
    sender = f.opt_object(top, "sender", "")
    return f.opt_str(sender, "login", "sender") if sender is not None else ""


def parse_issue(payload: object) -> IssueEvent | None:
    """An ``issues`` webhook body → the close / reopen it reports (``None`` for the other actions). Raises only
    ``PayloadError``, naming the field."""
    top = f.root(payload)
    action = f.req_str(top, "action", "", 50)
    if action not in ("closed", "reopened"):
        return None
    issue = f.req_object(top, "issue", "")
    url = f.http_url(f.req_str(issue, "html_url", "issue", f.URL_MAX + 1))
    if not url:
        raise PayloadError("issue.html_url", "must be an http(s) URL")
    changed = f.opt_time(issue, "updated_at", "issue") or f.opt_time(issue, "closed_at", "issue")
    repository = f.opt_object(top, "repository", "")
    return IssueEvent(
        action="closed" if action == "closed" else "reopened",
        url=url,
        number=_number(issue),
        repository=f.opt_str(repository, "full_name", "repository") if repository is not None else "",
        body=f.opt_str(issue, "body", "issue", BODY_MAX),
        reason=f.opt_str(issue, "state_reason", "issue", 50),
        by=_login(top),
        changed_at=iso(changed) if changed is not None else "",
    )
