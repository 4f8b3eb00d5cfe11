"""The ``http`` executor: decklog's webhook wire protocol for actions (DESIGN §7).

``POST <url>`` with JSON ``{action, params, scope, run_id, fence, idempotency_key}`` and an ``Idempotency-Key``
header. 2xx = applied (the body is recorded; its sha256 is the effect digest); 4xx = refused, nothing applied;
5xx, a timeout or a lost connection = uncertain. A connection that could not be opened at all = failed (nothing
was sent). The optional reconcile lookup: ``GET <reconcile_url>/<idempotency_key>`` → 200
``{"status": "applied" | "not_applied", ...}``, 404 = not applied; anything else (or ``"in_flight": true``) = still
unknown. Nothing here retries an effect.

Before any request, the URL goes through the egress allowlist (``core.egress.check``): a refused host gets nothing
sent, and the run records ``failed`` with the reason (``egress_refused``); a refused reconcile lookup is
``unknown``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
from pydantic import Field

from decklog.adapters.executors.options import ExecutorOptions
from decklog.core.actions.executor import (
    ExecutionOutcome,
    ExecutionRequest,
    ReconcileOutcome,
    digest_bytes,
    digest_json,
)
from decklog.core.egress import EgressPolicy, EgressRefusal, check

TYPE = "http"
MAX_RECORDED_BYTES = 64 * 1024


class HttpOptions(ExecutorOptions):
    """``[actions.executor]`` of ``type = "http"``: ``url``, ``reconcile_url`` (the lookup used when an outcome is
    uncertain), ``headers`` (sent with every request; an empty value is left out)."""

    NEEDS = ("url", "reconcile_url")

    reconcile_url: str = ""
    headers: dict[str, str] = Field(default_factory=dict)

    def urls(self) -> tuple[str, ...]:
        return (self.url, self.reconcile_url)


def parse_body(raw: bytes) -> dict[str, Any]:
    """A response body as something to record: its JSON object, or the (capped) text."""
    if len(raw) > MAX_RECORDED_BYTES:
        return {"truncated": raw[:MAX_RECORDED_BYTES].decode("utf-8", "replace"), "bytes": len(raw)}
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {"text": raw.decode("utf-8", "replace")}
    return value if isinstance(value, dict) else {"body": value}


def reason_of(body: Mapping[str, Any], status: int) -> str:
    for key in ("reason", "error", "message", "detail"):
        value = body.get(key)
        if isinstance(value, str) and value:
            return f"HTTP {status}: {value}"
    return f"HTTP {status}"


async def exchange(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    data: bytes,
    headers: Mapping[str, str],
    timeout: float,
) -> tuple[int, bytes] | ExecutionOutcome:
    """One request: its status and body, or the outcome a transport failure means. ``failed`` only when nothing was
    sent (no connection); ``uncertain`` whenever the effect may have been applied (a timeout, a lost connection),
    so that the runner reconciles instead of retrying."""
    try:
        async with session.request(
            method, url, data=data, headers=dict(headers), timeout=aiohttp.ClientTimeout(total=timeout)
        ) as resp:
            return resp.status, await resp.read()
    except TimeoutError:
        return ExecutionOutcome("uncertain", error=f"no answer within {timeout:g}s")
    except aiohttp.ClientConnectorError as exc:
        return ExecutionOutcome("failed", error=f"could not connect to {url}: {exc.os_error or exc}; nothing was sent")
    except (aiohttp.ClientError, ConnectionError, asyncio.IncompleteReadError) as exc:
        return ExecutionOutcome("uncertain", error=f"the connection was lost ({exc.__class__.__name__})")


def outcome_of(status: int, raw: bytes) -> ExecutionOutcome:
    """DESIGN §7: 2xx applied (the body's sha256 is the effect digest), 4xx refused, anything else uncertain."""
    parsed = parse_body(raw)
    if 200 <= status <= 299:
        return ExecutionOutcome("applied", status, parsed, digest_bytes(raw))
    if 400 <= status <= 499:
        return ExecutionOutcome("refused", status, parsed, error=reason_of(parsed, status))
    return ExecutionOutcome("uncertain", status, parsed, error=reason_of(parsed, status))


def egress_refused(refusal: EgressRefusal) -> ExecutionOutcome:
    """The outcome of a call the allowlist stopped: definitely not applied (nothing was sent)."""
    response = {"egress_refused": {"host": refusal.host, "url": refusal.url}}
    return ExecutionOutcome("failed", response=response, error=refusal.reason)


def build(
    options: HttpOptions, session: aiohttp.ClientSession, timeout: float, egress: EgressPolicy | None
) -> HttpExecutor:
    return HttpExecutor(
        session,
        url=options.url,
        reconcile_url=options.reconcile_url,
        timeout=timeout,
        headers=options.headers,
        egress=egress,
    )


class HttpExecutor:
    kind = TYPE

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        url: str,
        reconcile_url: str = "",
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
        egress: EgressPolicy | None = None,
    ) -> None:
        self.session = session
        self.url = url
        self.reconcile_url = reconcile_url.rstrip("/")
        # Without a configured policy, exactly this executor's own hosts (the default rule of core/egress.py).
        self.egress = egress or EgressPolicy.from_urls([url, reconcile_url])
        self.timeout = timeout
        self.headers = {k: v for k, v in (headers or {}).items() if v}

    @property
    def can_reconcile(self) -> bool:
        return bool(self.reconcile_url)

    async def execute(self, request: ExecutionRequest) -> ExecutionOutcome:
        refusal = check(self.egress, self.url)
        if refusal is not None:
            return egress_refused(refusal)
        body = json.dumps(request.wire(), separators=(",", ":")).encode()
        headers = {
            **self.headers,
            "Content-Type": "application/json",
            "Idempotency-Key": request.idempotency_key,
        }
        answer = await exchange(self.session, "POST", self.url, data=body, headers=headers, timeout=self.timeout)
        if isinstance(answer, ExecutionOutcome):
            return answer
        return outcome_of(*answer)

    async def reconcile(self, request: ExecutionRequest) -> ReconcileOutcome:
        if not self.reconcile_url:
            return ReconcileOutcome("unknown", error="no reconcile lookup is configured")
        url = f"{self.reconcile_url}/{quote(request.idempotency_key, safe='')}"
        refusal = check(self.egress, url)
        if refusal is not None:
            return ReconcileOutcome("unknown", error=f"the lookup was not made: {refusal.reason}")
        try:
            async with self.session.get(
                url, headers=self.headers, timeout=aiohttp.ClientTimeout(total=self.timeout)
            ) as resp:
                raw = await resp.read()
                status = resp.status
        except TimeoutError:
            return ReconcileOutcome("unknown", error=f"the lookup did not answer within {self.timeout:g}s")
        except (aiohttp.ClientError, ConnectionError) as exc:
            return ReconcileOutcome("unknown", error=f"the lookup failed ({exc.__class__.__name__})")
        body = parse_body(raw)
        if status == 404:
            return ReconcileOutcome("not_applied", body)
        if status != 200:
            return ReconcileOutcome("unknown", body, error=reason_of(body, status))
        said = body.get("status")
        if said == "applied":
            effect = body.get("effect")
            return ReconcileOutcome("applied", body, digest_json(effect if effect is not None else body))
        if said == "not_applied" and not body.get("in_flight"):
            return ReconcileOutcome("not_applied", body)
        why = "the request is still in flight at the target" if body.get("in_flight") else f"status {said!r}"
        return ReconcileOutcome("unknown", body, error=why)
