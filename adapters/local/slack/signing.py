"""Signing a request the way Slack signs what it sends to an app (``X-Slack-Signature``).

``v0=`` + hex HMAC-SHA256, keyed by the app's signing secret, of ``v0:{timestamp}:{raw body}``; the timestamp
travels in ``X-Slack-Request-Timestamp``. Bolt rejects a wrong signature or a timestamp older than 5 minutes.
"""

from __future__ import annotations

import hashlib
import hmac
import time

__all__ = ["sign", "signed_headers"]


def sign(secret: str, timestamp: str, body: bytes) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def signed_headers(
    secret: str,
    body: bytes,
    *,
    timestamp: int | str | None = None,
    signature: str | None = None,
) -> dict[str, str]:
    """Headers for ``body``; ``timestamp``/``signature`` override the honest values (stale or forged)."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": signature if signature is not None else sign(secret, stamp, body),
    }
