"""``ClaudeSummariser``: the catch-up's one bounded summarising call (core/agents/catchup.py's ``Summariser``).

One ``messages.create`` request: no tools, a ``max_tokens`` cap, the prompt ``prompts/catchup.md`` rendered
strictly over the joiner view. API failures (after the SDK's own retries) raise ``SummaryError`` with the
one-line description the failed turn records.
"""

from __future__ import annotations

from typing import Any

import anthropic

from decklog.adapters.anthropic.reasoner import _usage, describe_error, usage_cost
from decklog.core.agents.catchup import Summary, SummaryError
from decklog.core.agents.reasoner import Usage
from decklog.core.prompts import PromptLibrary

SYSTEM = "You summarise an incident's shared record for a responder who just joined. Be brief and factual."


class ClaudeSummariser:
    name = "claude"

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        *,
        prompts: PromptLibrary,
        model: str = "claude-sonnet-5-5",
        max_tokens: int = 600,
        max_lines: int = 12,
        request_timeout: float = 30.0,
        input_usd_per_mtok: float = 3.0,
        output_usd_per_mtok: float = 15.0,
    ) -> None:
        self.client = client
        self.prompts = prompts
        self.model = model
        self.max_tokens = max_tokens
        self.max_lines = max_lines
        self.request_timeout = request_timeout
        self.input_usd_per_mtok = input_usd_per_mtok
        self.output_usd_per_mtok = output_usd_per_mtok

    async def summarise(self, *, scope: str, view_name: str, view_text: str, view_bytes: int) -> Summary:
        prompt = self.prompts.render(
            "catchup",
            scope=scope,
            view_name=view_name,
            view_bytes=view_bytes,
            view=view_text,
            max_lines=self.max_lines,
        )
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": SYSTEM,
            "messages": [{"role": "user", "content": prompt}],
        }
        try:
            response = await self.client.messages.create(**params, timeout=self.request_timeout)
        except anthropic.APIError as exc:
            raise SummaryError(describe_error(exc), model=self.model) from exc
        usage = _usage(response.usage)
        cost = self.cost(usage)
        stop = response.stop_reason or ""
        text = "".join(b.text for b in response.content if b.type == "text").strip()
        if stop == "refusal":
            raise SummaryError(
                "the model declined to summarise (stop_reason refusal)", model=self.model, usage=usage, cost_usd=cost
            )
        if stop == "max_tokens":
            text = (text + " …").strip() + f" _(cut short at max_tokens={self.max_tokens})_"
        return Summary(text=text, model=response.model or self.model, usage=usage, cost_usd=cost, stop_reason=stop)

    def cost(self, u: Usage) -> float:
        return usage_cost(u, self.input_usd_per_mtok, self.output_usd_per_mtok)
