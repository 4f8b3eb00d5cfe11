"""Jira (REST API v2) as the follow-ups' tracker.

- find: ``GET /rest/api/2/search?jql=project = "P" AND labels = "<marker label>"`` (the marker as a label: labels
  cannot hold spaces, so it is ``decklog-`` and a digest of the marker);
- create: ``POST /rest/api/2/issue`` with ``fields: {project: {key}, summary, description, issuetype: {name},
  labels: ["incident-follow-up", <marker label>]}`` (+ ``duedate``) → 201 ``{"id", "key", "self"}``; the issue's
  URL is ``<DECKLOG_JIRA_URL>/browse/<key>``.

Basic auth with the account's email and API token. Errors: 400 (``{"errorMessages": [], "errors": {field:
why}}``), 401, 403, 404: permanent; 429 with ``Retry-After``: rate limited.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Literal

import aiohttp

from decklog.adapters.trackers.http import request_json
from decklog.core.follow_ups import TRACKER_LABEL, FiledIssue, IssueDraft


def marker_label(marker: str) -> str:
    return "decklog-" + hashlib.sha256(marker.encode()).hexdigest()[:16]


class JiraTracker:
    name: Literal["jira"] = "jira"

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        url: str,
        email: str,
        token: str,
        project: str,
        issue_type: str = "Task",
        timeout: float = 10.0,
    ) -> None:
        self.session = session
        self.url = url.rstrip("/")
        basic = base64.b64encode(f"{email}:{token}".encode()).decode()
        self.headers = {"Authorization": f"Basic {basic}", "Accept": "application/json"}
        self.project = project
        self.issue_type = issue_type
        self.timeout = timeout

    async def find(self, marker: str) -> FiledIssue | None:
        jql = f'project = "{self.project}" AND labels = "{marker_label(marker)}"'
        found, _ = await request_json(
            self.session,
            "GET",
            f"{self.url}/rest/api/2/search",
            headers=self.headers,
            params={"jql": jql, "fields": "status", "maxResults": "1"},
            timeout=self.timeout,
        )
        issues = found.get("issues") if isinstance(found, dict) else None
        if not issues or not isinstance(issues[0], dict) or not issues[0].get("key"):
            return None
        return FiledIssue(url=f"{self.url}/browse/{issues[0]['key']}", number=str(issues[0]["key"]))

    async def create(self, draft: IssueDraft) -> FiledIssue:
        fields: dict[str, object] = {
            "project": {"key": self.project},
            "summary": draft.title,
            "description": draft.body,
            "issuetype": {"name": self.issue_type},
            "labels": [TRACKER_LABEL, marker_label(draft.marker)],
        }
        if draft.due:
            fields["duedate"] = draft.due
        made, _ = await request_json(
            self.session,
            "POST",
            f"{self.url}/rest/api/2/issue",
            headers=self.headers,
            body={"fields": fields},
            timeout=self.timeout,
        )
        key = str(made.get("key") or "") if isinstance(made, dict) else ""
        return FiledIssue(url=f"{self.url}/browse/{key}", number=key or "?")
