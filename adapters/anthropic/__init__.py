"""Claude as a reasoner: the official ``anthropic`` SDK behind core's ``Reasoner`` protocol."""

from __future__ import annotations

import anthropic

from decklog.adapters.anthropic.reasoner import ClaudeReasoner, describe_error


def build_client(
    *, api_key: str, base_url: str | None = None, max_retries: int = 2, timeout: float = 60.0
) -> anthropic.AsyncAnthropic:
    """The SDK client (it retries 429/529 itself, honouring ``retry-after``, up to ``max_retries`` times)."""
    return anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout)


__all__ = ["ClaudeReasoner", "build_client", "describe_error"]
