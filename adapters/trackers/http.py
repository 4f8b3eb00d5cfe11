"""What the tracker clients share: one JSON request over aiohttp, and the mapping of errors to ``TrackerError``."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import aiohttp

from decklog.core.follow_ups import TrackerError

PERMANENT = (400, 401, 403, 404, 410, 422)


def retry_after(status: int, headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait when the answer is a rate limit (429, or GitHub's 403 with no requests left), else None."""
    remaining = headers.get("x-ratelimit-remaining")
    if status not in (403, 429) or (status == 403 and remaining != "0"):
        return None
    if (after := headers.get("retry-after", "")).strip().isdigit():
        return float(after)
    reset = headers.get("x-ratelimit-reset", "")
    if reset.isdigit():
        return max(1.0, float(reset) - (time.time() if now is None else now))
    return 60.0


def reason(body: Any, status: int) -> str:
    if isinstance(body, dict):
        if isinstance(body.get("message"), str):
            return f"HTTP {status}: {body['message']}"
        messages = [*body.get("errorMessages", ()), *(f"{k}: {v}" for k, v in (body.get("errors") or {}).items())]
        if messages:
            return f"HTTP {status}: {'; '.join(str(m) for m in messages)}"
    return f"HTTP {status}"


async def request_json(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    headers: Mapping[str, str],
    body: Any = None,
    params: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[Any, Mapping[str, str]]:
    """The JSON answer of a 2xx, with its headers; anything else raises ``TrackerError``."""
    data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
    try:
        async with session.request(
            method,
            url,
            data=data,
            params=params,
            headers={**headers, **({"Content-Type": "application/json"} if data is not None else {})},
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as resp:
            raw, status, got = await resp.read(), resp.status, {k.lower(): v for k, v in resp.headers.items()}
    except TimeoutError:
        raise TrackerError(f"{method} {url}: no answer within {timeout:g}s") from None
    except (aiohttp.ClientError, ConnectionError) as exc:
        raise TrackerError(f"{method} {url}: {exc.__class__.__name__}") from None
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = None
    if 200 <= status <= 299:
        return parsed, got
    wait = retry_after(status, got)
    if wait is not None:
        raise TrackerError(f"rate limited ({reason(parsed, status)})", status=status, retry_after=wait)
    raise TrackerError(reason(parsed, status), status=status, permanent=status in PERMANENT)
