"""Loopback fakes of GitHub's Issues API and Jira's REST API v2, speaking their wire formats.

GitHub: ``Authorization: Bearer|token <t>`` (else 401 ``{"message": "Bad credentials", "documentation_url"}``),
unknown repository 404 ``{"message": "Not Found"}``, a missing title 422 ``{"message": "Validation Failed",
"errors": [{"resource": "Issue", "code": "missing_field", "field": "title"}]}``; ``POST …/issues`` → 201 with the
issue (``id``, ``number``, ``html_url``, ``url``, ``state``, ``title``, ``body``, ``labels``); the list is newest
first, paged with a ``Link`` header; every answer has ``x-ratelimit-*`` headers. ``rate_limit()`` queues GitHub's
secondary-limit answer (403, ``x-ratelimit-remaining: 0``, ``retry-after``).

Jira: Basic auth (else 401), unknown project 400 ``{"errorMessages": [], "errors": {"project": "…"}}``; ``POST
/rest/api/2/issue`` → 201 ``{"id", "key", "self"}``; ``GET /rest/api/2/search?jql=…`` understands the ``project =
"P" AND labels = "L"`` queries the client sends; 429 with ``Retry-After`` when queued.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from aiohttp import web

from tests.fakes.loopback import LoopbackFake, error

GH_DOCS = "https://docs.github.com/rest"


class FakeGitHub(LoopbackFake):
    def __init__(self, *, token: str = "ghp_test", repos: tuple[str, ...] = ("acme/shop",), page_size: int = 100):
        super().__init__()
        self.token = token
        self.issues: dict[str, list[dict[str, Any]]] = {r: [] for r in repos}
        self.page_size = page_size

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/repos/{owner}/{repo}/issues", self._list)
        app.router.add_post("/repos/{owner}/{repo}/issues", self._create)

    def rate_limit(self, retry_after: int = 1) -> None:
        headers = {"x-ratelimit-remaining": "0", "x-ratelimit-limit": "5000", "retry-after": str(retry_after)}
        body = {"message": "You have exceeded a secondary rate limit.", "documentation_url": GH_DOCS}
        self.queued.append((403, headers, body))

    def _check(self, request: web.Request) -> tuple[str, web.Response | None]:
        auth = request.headers.get("Authorization", "")
        if auth not in (f"Bearer {self.token}", f"token {self.token}"):
            return "", error(401, {"message": "Bad credentials", "documentation_url": GH_DOCS})
        repo = f"{request.match_info['owner']}/{request.match_info['repo']}"
        if repo not in self.issues:
            return "", error(404, {"message": "Not Found", "documentation_url": GH_DOCS})
        return repo, None

    def _headers(self) -> dict[str, str]:
        return {"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "4999", "x-ratelimit-reset": "1999999999"}

    async def _list(self, request: web.Request) -> web.Response:
        repo, refused = self._check(request)
        if refused is not None:
            return refused
        label = request.query.get("labels", "")
        state = request.query.get("state", "open")
        page = int(request.query.get("page", "1"))
        size = min(int(request.query.get("per_page", str(self.page_size))), self.page_size)
        found = [
            i
            for i in reversed(self.issues[repo])
            if (not label or label in [x["name"] for x in i["labels"]]) and state in ("all", i["state"])
        ]
        chunk = found[(page - 1) * size : page * size]
        headers = self._headers()
        if page * size < len(found):
            query = "&".join(f"{k}={v}" for k, v in {**request.query, "page": str(page + 1)}.items())
            headers["Link"] = f'<{self.base_url}{request.path}?{query}>; rel="next"'
        return web.json_response(chunk, headers=headers)

    async def _create(self, request: web.Request) -> web.Response:
        repo, refused = self._check(request)
        if refused is not None:
            return refused
        try:
            body = await request.json()
        except ValueError:
            return error(400, {"message": "Problems parsing JSON", "documentation_url": GH_DOCS})
        if not isinstance(body, dict) or not str(body.get("title") or "").strip():
            missing = {"resource": "Issue", "code": "missing_field", "field": "title"}
            return error(422, {"message": "Validation Failed", "errors": [missing], "documentation_url": GH_DOCS})
        number = sum(len(v) for v in self.issues.values()) + 1
        issue = {
            "id": 1000 + number,
            "number": number,
            "url": f"{self.base_url}/repos/{repo}/issues/{number}",
            "html_url": f"https://github.com/{repo}/issues/{number}",
            "state": "open",
            "title": body["title"],
            "body": body.get("body") or "",
            "labels": [{"name": n} for n in body.get("labels") or []],
        }
        self.issues[repo].append(issue)
        return web.json_response(issue, status=201, headers=self._headers())


class FakeJira(LoopbackFake):
    def __init__(self, *, email: str = "bot@acme.test", token: str = "jira_test", projects: tuple[str, ...] = ("OPS",)):
        super().__init__()
        self.auth = "Basic " + base64.b64encode(f"{email}:{token}".encode()).decode()
        self.projects = projects
        self.issues: list[dict[str, Any]] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/rest/api/2/issue", self._create)
        app.router.add_get("/rest/api/2/search", self._search)

    def rate_limit(self, retry_after: int = 1) -> None:
        self.queued.append((429, {"Retry-After": str(retry_after)}, {"errorMessages": ["Rate limit exceeded."]}))

    def _authorised(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == self.auth

    async def _create(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.Response(status=401, text="Basic authentication with passwords is deprecated.")
        try:
            fields = (await request.json())["fields"]
        except (ValueError, KeyError, TypeError):
            return error(400, {"errorMessages": ["Can not deserialize the request body."], "errors": {}})
        project = (fields.get("project") or {}).get("key")
        if project not in self.projects:
            return error(400, {"errorMessages": [], "errors": {"project": "project is required"}})
        if not str(fields.get("summary") or "").strip():
            return error(400, {"errorMessages": [], "errors": {"summary": "You must specify a summary of the issue."}})
        n = len(self.issues) + 1
        issue = {"id": str(10000 + n), "key": f"{project}-{n}", "self": f"{self.base_url}/rest/api/2/issue/{10000 + n}"}
        self.issues.append({**issue, "fields": fields})
        return web.json_response(issue, status=201)

    async def _search(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.Response(status=401, text="Unauthorized")
        m = re.fullmatch(r'project = "([^"]+)" AND labels = "([^"]+)"', request.query.get("jql", ""))
        if m is None:
            return error(400, {"errorMessages": ["Error in the JQL Query."], "errors": {}})
        hits = [
            {"id": i["id"], "key": i["key"], "self": i["self"], "fields": {"status": {"name": "To Do"}}}
            for i in self.issues
            if i["key"].startswith(m.group(1) + "-") and m.group(2) in i["fields"].get("labels", [])
        ]
        return web.json_response({"startAt": 0, "maxResults": 1, "total": len(hits), "issues": hits[:1]})
