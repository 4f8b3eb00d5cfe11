"""``JsonReader``: a bounded GET of a JSON API for the read tools.

Before a request the URL passes the egress allowlist (``core.egress.check``); a refusal sends nothing. The answer
is read up to ``max_bytes`` (a larger one is refused, not truncated: half a JSON document is no evidence), within
``timeout_s``. Auth is a bearer token or basic credentials, never written into an error. Every failure raises
``SourceError`` with one line fit for an observation.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from decklog.core.egress import EgressPolicy, check
from decklog.core.evidence.ports import SourceError

DEFAULT_MAX_BYTES = 2_000_000


class JsonReader:
    def __init__(
        self,
        base_url: str,
        *,
        egress: EgressPolicy | None,
        bearer: str = "",
        basic: tuple[str, str] | None = None,
        timeout_s: float = 3.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.egress = egress
        self.headers = {"Accept": "application/json"}
        if bearer:
            self.headers["Authorization"] = f"Bearer {bearer}"
        self.auth = aiohttp.BasicAuth(*basic) if basic else None
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._session = session
        self._owned = session is None

    async def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
            self._owned = True
        return self._session

    async def close(self) -> None:
        if self._owned and self._session is not None and not self._session.closed:
            await self._session.close()

    async def get(self, path: str, params: dict[str, str] | None = None) -> Any:
        url = self.base_url + path
        if self.egress is not None and (refusal := check(self.egress, url)) is not None:
            raise SourceError(refusal.reason)
        http = await self._http()
        try:
            async with http.get(
                url,
                params=params or {},
                headers=self.headers,
                auth=self.auth,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            ) as response:
                body = bytearray()
                async for chunk in response.content.iter_chunked(65_536):
                    body += chunk
                    if len(body) > self.max_bytes:
                        raise SourceError(f"{path} answered more than {self.max_bytes} bytes")
                if response.status >= 400:
                    snippet = body[:200].decode(errors="replace").strip()
                    raise SourceError(f"{path} answered HTTP {response.status}: {snippet}")
        except (aiohttp.ClientError, OSError) as exc:
            raise SourceError(f"{self.base_url} is unreachable: {exc.__class__.__name__} {exc}".strip()) from None
        except TimeoutError:
            raise SourceError(f"{path} gave no answer within {self.timeout_s:g}s") from None
        try:
            return json.loads(body)
        except ValueError:
            raise SourceError(f"{path} did not answer JSON") from None
