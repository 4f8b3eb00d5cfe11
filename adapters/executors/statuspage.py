"""The ``statuspage`` executor: creates or updates the incident of a decklog scope on a Statuspage-compatible API.

One Statuspage incident per decklog scope, found by its ``metadata.decklog.scope``: the first run creates it
(``POST /v1/pages/{page}/incidents``), later runs update it (``PATCH …/incidents/{id}``); once it is resolved, a
new run opens a new one. Requests carry ``Authorization: OAuth <api key>`` and the run's ``Idempotency-Key``;
each write stamps ``metadata.decklog.idempotency_key``, which is how ``reconcile`` finds out whether an uncertain
write landed. The URL is the API base (``https://api.statuspage.io``, with ``page_id`` configured) or a page's URL
(``…/v1/pages/<page_id>``); the key may also come as the URL's user part (``https://KEY@host/…``).

Every request goes to the page's API URL; before any of them, that URL goes through the egress allowlist
(``core.egress.check``): a refused host gets nothing sent (``failed`` with the reason; a reconcile is ``unknown``).

Parameters (``[actions.params]``): ``status`` (investigating | identified | monitoring | resolved), ``message``
(the update's text), optional ``name`` (the incident title) and ``impact`` (none | minor | major | critical).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp

from decklog.adapters.executors.http import egress_refused, exchange, outcome_of, parse_body, reason_of
from decklog.adapters.executors.options import ExecutorOptions
from decklog.core.actions.executor import ExecutionOutcome, ExecutionRequest, ReconcileOutcome, digest_json
from decklog.core.egress import EgressPolicy, check

TYPE = "statuspage"


class StatuspageOptions(ExecutorOptions):
    """``[actions.executor]`` of ``type = "statuspage"``: ``url`` (the API base, or a page's URL ending in
    ``/v1/pages/<page_id>``), ``page_id`` (with an API base), ``api_key`` (or the URL's user part)."""

    page_id: str = ""
    api_key: str = ""

    def unavailable(self, unset: Mapping[str, str]) -> str:
        why = super().unavailable(unset)
        if not why and not self.page_id and "/pages/" not in self.url:
            why = "no Statuspage page id (set page_id, or use a URL ending in /v1/pages/<page_id>)"
        return why


def build(
    options: StatuspageOptions, session: aiohttp.ClientSession, timeout: float, egress: EgressPolicy | None
) -> StatuspageExecutor:
    return StatuspageExecutor(
        session, url=options.url, page_id=options.page_id, api_key=options.api_key, timeout=timeout, egress=egress
    )


def page_base(url: str, page_id: str) -> tuple[str, str]:
    """(the page's API URL ``…/v1/pages/<id>``, the API key from the URL's user part or "")."""
    parts = urlsplit(url)
    key = unquote(parts.username or "")
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    path = parts.path.rstrip("/")
    if "/pages/" not in path:
        if not page_id:
            raise ValueError("a Statuspage executor needs page_id (or a URL ending in /v1/pages/<page_id>)")
        path = f"{path}/v1/pages/{page_id}"
    return urlunsplit((parts.scheme, netloc, path, "", "")), key


class StatuspageExecutor:
    kind = TYPE

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        url: str,
        page_id: str = "",
        api_key: str = "",
        timeout: float = 10.0,
        egress: EgressPolicy | None = None,
    ) -> None:
        self.session = session
        self.base, url_key = page_base(url, page_id)
        self.api_key = api_key or url_key
        self.timeout = timeout
        self.egress = egress or EgressPolicy.from_urls([url])

    @property
    def can_reconcile(self) -> bool:
        return True

    def _headers(self, key: str | None = None) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"OAuth {self.api_key}"
        if key:
            headers["Idempotency-Key"] = key
        return headers

    async def _current(self, scope: str) -> tuple[dict[str, Any] | None, str]:
        """The latest incident of ``scope`` on the page (or None) — or an error text when the list failed."""
        try:
            async with self.session.get(
                f"{self.base}/incidents",
                params={"limit": "100"},
                headers=self._headers(),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            ) as resp:
                raw, status = await resp.read(), resp.status
        except TimeoutError:
            return None, f"listing incidents did not answer within {self.timeout:g}s"
        except (aiohttp.ClientError, ConnectionError) as exc:
            return None, f"listing incidents failed ({exc.__class__.__name__})"
        if status != 200:
            return None, reason_of(parse_body(raw), status)
        try:
            incidents = json.loads(raw)
        except ValueError:
            return None, "listing incidents answered something that is not JSON"
        mine = [i for i in incidents if isinstance(i, dict) and _decklog(i).get("scope") == scope]
        return (mine[0] if mine else None), ""

    async def execute(self, request: ExecutionRequest) -> ExecutionOutcome:
        refusal = check(self.egress, self.base)
        if refusal is not None:
            return egress_refused(refusal)
        current, problem = await self._current(request.scope)
        if problem:
            return ExecutionOutcome("failed", error=f"{problem}; nothing was sent")
        p = request.params
        fields: dict[str, Any] = {
            "status": p.get("status", "investigating"),
            "body": p.get("message", ""),
            "metadata": {
                "decklog": {
                    "scope": request.scope,
                    "run_id": request.run_id,
                    "fence": request.fence,
                    "idempotency_key": request.idempotency_key,
                }
            },
        }
        if p.get("impact"):
            fields["impact_override"] = p["impact"]
        if current is not None and current.get("status") != "resolved":
            method, url = "PATCH", f"{self.base}/incidents/{current['id']}"
            if p.get("name"):
                fields["name"] = p["name"]
        else:
            method, url = "POST", f"{self.base}/incidents"
            fields["name"] = p.get("name") or f"Incident {request.scope.split('/', 1)[-1]}"
        body = json.dumps({"incident": fields}, separators=(",", ":")).encode()
        headers = self._headers(request.idempotency_key)
        answer = await exchange(self.session, method, url, data=body, headers=headers, timeout=self.timeout)
        if isinstance(answer, ExecutionOutcome):
            return answer
        status, raw = answer
        return outcome_of(status, raw)

    async def reconcile(self, request: ExecutionRequest) -> ReconcileOutcome:
        refusal = check(self.egress, self.base)
        if refusal is not None:
            return ReconcileOutcome("unknown", error=f"the lookup was not made: {refusal.reason}")
        current, problem = await self._current(request.scope)
        if problem:
            return ReconcileOutcome("unknown", error=problem)
        if current is not None and _decklog(current).get("idempotency_key") == request.idempotency_key:
            return ReconcileOutcome("applied", {"status": "applied", "incident": current}, digest_json(current))
        return ReconcileOutcome("not_applied", {"status": "not_applied"})


def _decklog(incident: dict[str, Any]) -> dict[str, Any]:
    meta = incident.get("metadata") or {}
    found = meta.get("decklog") if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else {}
