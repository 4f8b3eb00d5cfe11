"""GitHub Issues as the follow-ups' tracker (REST API, ``X-GitHub-Api-Version: 2022-11-28``).

- find: ``GET /repos/{owner}/{repo}/issues?labels=incident-follow-up&state=all`` (newest first, paged by the
  ``Link`` header): the issue whose body carries the marker. The list (not the search API, whose index lags) is
  read, so an issue created a moment ago is found.
- create: ``POST /repos/{owner}/{repo}/issues`` with ``title``, ``body`` (linking the incident, ending in the
  marker) and ``labels: ["incident-follow-up"]`` → 201 with ``number`` and ``html_url``.

``Authorization: Bearer <token>``. Errors: 401 bad credentials, 404 no such repository (or no access), 410 issues
disabled, 422 validation failed: permanent. 403 with ``x-ratelimit-remaining: 0`` or 429: rate limited until
``retry-after`` / ``x-ratelimit-reset``.
"""

from __future__ import annotations

from typing import Any, Literal

import aiohttp

from decklog.adapters.trackers.http import request_json
from decklog.core.follow_ups import TRACKER_LABEL, FiledIssue, IssueDraft

MAX_PAGES = 10


class GitHubTracker:
    name: Literal["github"] = "github"

    def __init__(
        self, session: aiohttp.ClientSession, *, repo: str, token: str, api_url: str, timeout: float = 10.0
    ) -> None:
        self.session = session
        self.base = f"{api_url.rstrip('/')}/repos/{repo}"
        self.headers = {
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {token}",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "decklog",
        }
        self.timeout = timeout

    async def find(self, marker: str) -> FiledIssue | None:
        url: str | None = f"{self.base}/issues"
        params: dict[str, str] | None = {"labels": TRACKER_LABEL, "state": "all", "per_page": "100"}
        for _ in range(MAX_PAGES):
            if url is None:
                break
            issues, headers = await request_json(
                self.session, "GET", url, headers=self.headers, params=params, timeout=self.timeout
            )
            for issue in issues if isinstance(issues, list) else ():
                if isinstance(issue, dict) and marker in str(issue.get("body") or ""):
                    return _filed(issue)
            url, params = _next_link(headers.get("link", "")), None
        return None

    async def create(self, draft: IssueDraft) -> FiledIssue:
        body = {"title": draft.title, "body": draft.body, "labels": [TRACKER_LABEL]}
        issue, _ = await request_json(
            self.session, "POST", f"{self.base}/issues", headers=self.headers, body=body, timeout=self.timeout
        )
        return _filed(issue if isinstance(issue, dict) else {})


def _filed(issue: dict[str, Any]) -> FiledIssue:
    return FiledIssue(
        url=str(issue.get("html_url") or ""),
        number=str(issue.get("number") or "?"),
        state=str(issue.get("state") or "open"),
    )


def _next_link(link: str) -> str | None:
    for part in link.split(","):
        if 'rel="next"' in part and "<" in part:
            return part[part.index("<") + 1 : part.index(">")]
    return None
