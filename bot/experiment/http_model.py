"""``--model scripted-http`` / ``recorded:DIR``: the scripted policy behind a content-keyed fake Messages API on
loopback, called through the official ``anthropic`` SDK (so requests, responses and usage go over real HTTP).

``DECKLOG_EXPERIMENT_RECORD=DIR`` (``--record DIR``) appends every exchange to ``DIR/exchanges.jsonl``;
``recorded:DIR`` answers only from such a recording (a prompt it has not seen is an error, never a guess).
Not the full ``ClaudeReasoner`` tool loop: one request per coordination decision.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import anthropic
from aiohttp import web

from core.experiment import policy
from core.experiment.view import usage_for


class HttpModel:
    def __init__(self, model: str, mutation: str) -> None:
        self.mutation = mutation
        self.recorded: dict[str, dict[str, Any]] | None = None
        if model.startswith("recorded:"):
            path = Path(model.removeprefix("recorded:")) / "exchanges.jsonl"
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            self.recorded = {r["key"]: r for r in rows}
        record = os.environ.get("DECKLOG_EXPERIMENT_RECORD", "")
        self.record = Path(record) / "exchanges.jsonl" if record else None
        self.prefix = -1
        self.runner: web.AppRunner | None = None
        self.client: anthropic.AsyncAnthropic | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.client = anthropic.AsyncAnthropic(api_key="fake-key", base_url=f"http://127.0.0.1:{port}", max_retries=0)

    async def stop(self) -> None:
        if self.client:
            await self.client.close()
        if self.runner:
            await self.runner.cleanup()

    async def _messages(self, request: web.Request) -> web.Response:
        body = await request.json()
        system = body["system"][0]["text"] if isinstance(body["system"], list) else body["system"]
        view = body["messages"][-1]["content"]
        key = hashlib.sha256((system + "\n" + view).encode()).hexdigest()
        if self.recorded is not None:
            row = self.recorded.get(key)
            if row is None:
                return web.json_response(
                    {
                        "type": "error",
                        "error": {"type": "not_found_error", "message": "no recorded exchange for this prompt"},
                    },
                    status=404,
                )
            answer, usage = row["answer"], row["usage"]
        else:
            answer = json.dumps(policy.decide(view, self.mutation), sort_keys=True)
            usage = usage_for(system + "\n" + view, answer, max(self.prefix, len(system)) if self.prefix >= 0 else 0)
            self.prefix = len((system + "\n" + view).encode())
        if self.record:
            self.record.parent.mkdir(parents=True, exist_ok=True)
            with self.record.open("a") as fh:
                fh.write(json.dumps({"key": key, "answer": answer, "usage": usage}) + "\n")
        return web.json_response(
            {
                "id": "msg_" + key[:24],
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": answer}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": usage,
            }
        )

    async def call(self, system: str, view: str) -> tuple[str, dict[str, int]]:
        assert self.client is not None
        msg = await self.client.messages.create(
            model="scripted-policy",
            max_tokens=1024,
            system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            messages=[{"role": "user", "content": view}],
        )
        text = "".join(b.text for b in msg.content if b.type == "text")
        u = msg.usage
        usage = {
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cache_read_input_tokens": u.cache_read_input_tokens or 0,
            "cache_creation_input_tokens": u.cache_creation_input_tokens or 0,
        }
        return text, usage
