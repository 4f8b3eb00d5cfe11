"""``--model scripted-http`` / ``recorded:DIR``: every coordination decision is one real ``ClaudeReasoner`` turn
(adapters/anthropic: the shipped prompts, the real tool specs and ``ToolBox``, the bounded tool-use loop, usage
and cost accounting, over the official SDK) against a content-keyed fake Messages API on loopback.

The fake answers each request from its content alone:

- a request whose last user message carries no ``tool_result`` (the turn's first step): ``stop_reason:
  tool_use`` with a real R1 read (``get_state``) and a ``suggest`` call whose text is the scripted policy's
  decision, computed from the ``<view>`` in the rendered prompt (so the policy sees exactly what the model would);
- a request that answers tool calls (the second step): ``end_turn``.

The decision travels in ``suggest``: this ``ClaudeReasoner`` turn is the model call inside the experiment's
``ScriptedReasoner`` turn (research/experiment/reasoner.py), which then carries the decision out through the agents'
tools (``record_hypothesis``, ``open_obligation``, ``propose_action``) in the product's own turn runtime.

Usage is about one token per four bytes of the request's canonical JSON, with the stable prefix (tools + system,
the one ``cache_control`` breakpoint) written to the cache on first use and read from it afterwards.

``DECKLOG_EXPERIMENT_RECORD=DIR`` (``--record DIR``) appends every exchange to ``DIR/exchanges.jsonl``, keyed by
the request's content; ``recorded:DIR`` answers only from such a recording (an unseen request is a 404).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import anthropic
from aiohttp import web

from decklog.adapters.anthropic.reasoner import ClaudeReasoner
from decklog.core.agents.reasoner import TurnInput
from decklog.core.agents.tools import ToolBox
from decklog.core.clock import Clock
from decklog.core.prompts import PromptLibrary
from decklog.core.store.ports import LogStore
from decklog.core.views import View
from research.experiment import policy

_VIEW = re.compile(r"<view>\n(.*)\n</view>", re.S)


class _Views:
    """The experiment's view of the scope (cold or warm, built by the run) behind the ``ViewReader`` port."""

    def __init__(self, scope: str, text: str) -> None:
        self.scope, self.text = scope, text

    async def view(self, name: str, *, obligation_id: str | None = None) -> View:
        return View(name, self.scope, 0, len(self.text.encode()), {}, (), self.text)


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# The desk draws its run and proposal ids at random (``new_run_id``, ``new_proposal_id``); a request's key masks
# them, so that a recording replays (the scripted answers never depend on them).
_RANDOM_IDS = re.compile(r"\b(run-[0-9a-f]{8}|p-[0-9a-f]{6})\b")
# Entries that senders append concurrently after one commit (a change link, the Slack sender's own records) take
# their seqs in whatever order the drains run, and a loaded machine changes that order: the same view then numbers
# its lines differently. A key masks the view's ``seq=N`` too (no view refers to an entry by its seq otherwise).
_SEQS = re.compile(r"seq=\d+")


def _key(body: dict[str, Any]) -> str:
    text = _canon([body["system"], body["messages"], body.get("tools", [])])
    text = _SEQS.sub("seq=<n>", _RANDOM_IDS.sub("<id>", text))
    return hashlib.sha256(text.encode()).hexdigest()


class HttpModel:
    def __init__(self, model: str, mutation: str, store: LogStore, clock: Clock) -> None:
        self.mutation, self.store, self.clock = mutation, store, clock
        self.recorded: dict[str, dict[str, Any]] | None = None
        if model.startswith("recorded:"):
            path = Path(model.removeprefix("recorded:")) / "exchanges.jsonl"
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            self.recorded = {r["key"]: r for r in rows}
        record = os.environ.get("DECKLOG_EXPERIMENT_RECORD", "")
        self.record = Path(record) / "exchanges.jsonl" if record else None
        self.cached: set[str] = set()
        self.sent_bytes = 0
        self.runner: web.AppRunner | None = None
        self.reasoner: ClaudeReasoner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        client = anthropic.AsyncAnthropic(api_key="fake-key", base_url=f"http://127.0.0.1:{port}", max_retries=0)
        self.reasoner = ClaudeReasoner(client, prompts=PromptLibrary.shipped(), model="scripted-policy", max_steps=3)

    async def stop(self) -> None:
        if self.reasoner:
            await self.reasoner.client.close()
        if self.runner:
            await self.runner.cleanup()

    # -- the fake Messages API ---------------------------------------------------------------------------------

    async def _messages(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.sent_bytes += len(raw)
        body = json.loads(raw)
        key = _key(body)
        if self.recorded is not None:
            row = self.recorded.get(key)
            if row is None:
                error = {"type": "not_found_error", "message": "no recorded exchange for this request"}
                return web.json_response({"type": "error", "error": error}, status=404)
            reply: dict[str, Any] = row["reply"]
        else:
            reply = self._answer(body, key)
        if self.record:
            self.record.parent.mkdir(parents=True, exist_ok=True)
            with self.record.open("a") as fh:
                fh.write(json.dumps({"key": key, "reply": reply}) + "\n")
        return web.json_response(reply)

    def _answer(self, body: dict[str, Any], key: str) -> dict[str, Any]:
        last = body["messages"][-1]["content"]
        answering = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
        if answering:
            content: list[dict[str, Any]] = [{"type": "text", "text": "Recorded."}]
            stop = "end_turn"
        else:
            found = _VIEW.search(last if isinstance(last, str) else "")
            decision = policy.decide(found.group(1) if found else "", self.mutation)
            content = [
                {"type": "tool_use", "id": f"toolu_{key[:20]}a", "name": "get_state", "input": {}},
                {
                    "type": "tool_use",
                    "id": f"toolu_{key[:20]}b",
                    "name": "suggest",
                    "input": {"text": _canon(decision)},
                },
            ]
            stop = "tool_use"
        return {
            "id": "msg_" + key[:24],
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": self._usage(body, content),
        }

    def _usage(self, body: dict[str, Any], content: list[dict[str, Any]]) -> dict[str, int]:
        prefix = _canon([body.get("tools", []), body["system"]])
        rest = len(_canon(body["messages"]).encode()) // 4
        first = prefix not in self.cached
        self.cached.add(prefix)
        size = len(prefix.encode()) // 4
        return {
            "input_tokens": max(1, rest),
            "output_tokens": max(1, len(_canon(content).encode()) // 4),
            "cache_creation_input_tokens": size if first else 0,
            "cache_read_input_tokens": 0 if first else size,
        }

    # -- the Model port -----------------------------------------------------------------------------------------

    async def call(self, system: str, view: str, scope: str) -> tuple[str, dict[str, int]]:
        assert self.reasoner is not None
        state = await self.store.get_state(scope)
        views = _Views(scope, view)
        now, sent = self.clock.now(), self.sent_bytes
        tools = ToolBox(store=self.store, state=state, views=views, now=now)
        turn = TurnInput(scope=scope, state=state, trigger="experiment", now=now, views=views, tools=tools)
        out = await self.reasoner.run(turn)
        text = next((s.text for s in out.suggestions), "{}")
        u = out.usage
        usage = {
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cache_read_input_tokens": u.cache_read_input_tokens,
            "cache_creation_input_tokens": u.cache_creation_input_tokens,
            "context_bytes": self.sent_bytes - sent,  # the request bodies this turn sent
        }
        return text, usage
