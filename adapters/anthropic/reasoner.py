"""``ClaudeReasoner``: the ``Reasoner`` protocol on Claude, through the official ``anthropic`` SDK.

One bounded tool-use loop per turn:

- at most ``max_steps`` requests; on the last one the tools stay in the request (so the cached prefix stays the
  same) but ``tool_choice: {"type": "none"}`` withholds them, so the model must answer in text;
- the stable prefix — tools, then the system prompt — carries one ``cache_control`` breakpoint (on the system
  block), so later steps and later turns read it from the prompt cache;
- all ``tool_result`` blocks answering one assistant message go back in ONE user message, in order; a response
  whose tool calls cannot be answered (``max_tokens`` mid-call, the step cap) ends the loop instead of being sent
  back half-answered (the API would refuse it with a 400);
- stop reasons: ``tool_use`` (run the tools, continue), ``end_turn`` / ``stop_sequence`` (done), ``max_tokens``
  (keep the text, note the cut), ``pause_turn`` (send the paused turn back, continue), ``refusal`` (record
  it, no intents);
- API failures (429/529 after the SDK's own retries honouring ``retry-after``, 5xx, timeouts, connection
  errors) raise ``ReasonerError`` carrying the usage spent so far; the runtime records a failed turn.

Prompts come from ``prompts/`` (strict rendering, core/prompts.py). Tools are core's (core/agents/tools.py):
read tools are R1; writing tools only collect intents.
"""

from __future__ import annotations

import re
from typing import Any

import anthropic

from decklog.core.agents.reasoner import ReasonerError, Tools, TurnInput, TurnOutput, Usage
from decklog.core.prompts import PromptLibrary

_SUMMARY = re.compile(r"\b(summar|catch me up|status|what.?s (going on|happening)|overview|joined)", re.I)
TASKS = {
    "follow_up": (
        "An obligation with an action was just opened. If it is still warranted and nothing was proposed for it "
        "yet, propose it with propose_action (it parks for approval). Otherwise record nothing."
    ),
    "default": (
        "Look at what is new. If the evidence points at a cause, record a hypothesis citing it. If an available "
        "action would fix it, open an obligation stating the conditions under which it is safe, then propose it. "
        "If every alert has resolved, suggest resolving. If nothing is worth recording, record nothing."
    ),
}


class ClaudeReasoner:
    name = "claude"
    wants_wakes = False

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        *,
        prompts: PromptLibrary,
        model: str = "claude-sonnet-5-5",
        max_steps: int = 6,
        max_tokens: int = 1024,
        request_timeout: float = 60.0,
        input_usd_per_mtok: float = 3.0,
        output_usd_per_mtok: float = 15.0,
    ) -> None:
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self.client = client
        self.prompts = prompts
        self.model = model
        self.max_steps = max_steps
        self.max_tokens = max_tokens
        self.request_timeout = request_timeout
        self.input_usd_per_mtok = input_usd_per_mtok
        self.output_usd_per_mtok = output_usd_per_mtok

    async def run(self, turn: TurnInput) -> TurnOutput:
        if turn.tools is None:
            raise ReasonerError("the Claude reasoner needs the turn's tools")
        tools = turn.tools
        system, messages = await self._opening(turn)
        api_tools = [spec.to_api() for spec in tools.specs()]
        out = TurnOutput(model=self.model)
        text = ""
        for step in range(1, self.max_steps + 1):
            last = step == self.max_steps
            response = await self._request(system, api_tools, messages, last=last, out=out, tools=tools)
            out.usage.add(_usage(response.usage))
            stop = response.stop_reason or ""
            out.tool_calls.append({"tool": "model", "step": step, "stop_reason": stop})
            content = [_as_param(block) for block in response.content]
            content = [c for c in content if c is not None]
            text = "".join(b.text for b in response.content if b.type == "text").strip()
            if stop == "tool_use" and not last:
                messages.append({"role": "assistant", "content": content})
                messages.append({"role": "user", "content": await _tool_results(tools, response.content)})
                continue
            if stop == "pause_turn" and not last:
                if content:
                    messages.append({"role": "assistant", "content": content})
                continue
            if stop == "refusal":
                out.outcome = "refused"
                out.error = "the model declined to continue (stop_reason refusal)"
                if turn.question:
                    out.answer = "The model declined to answer this question."
                return self._finish(out, tools, keep_intents=False)
            if stop == "max_tokens":
                text = (text + " …").strip() + f" (cut short at max_tokens={self.max_tokens})"
            elif stop not in ("end_turn", "stop_sequence", "tool_use", "pause_turn"):
                raise ReasonerError(f"unexpected stop_reason {stop!r}", partial=self._finish(out, tools))
            break
        if turn.question:
            out.answer = text or None
        return self._finish(out, tools)

    async def _opening(self, turn: TurnInput) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The system block (the cached prefix's breakpoint) and the first user message (the prompt over a view)."""
        view_name = self.view_for(turn)
        view = await turn.views.view(view_name)
        system = [
            {
                "type": "text",
                "text": self.prompts.render("system", actions=self._actions(turn)),
                "cache_control": {"type": "ephemeral"},
            }
        ]
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": self._prompt(turn, view_name, view.bytes, view.text)}
        ]
        return system, messages

    async def _request(
        self,
        system: list[dict[str, Any]],
        api_tools: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        *,
        last: bool,
        out: TurnOutput,
        tools: Tools,
    ) -> Any:
        """One step's request; on the last one the tools stay (the cached prefix) but ``tool_choice`` is none."""
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": system,
            "tools": api_tools,
            "messages": messages,
        }
        if last:
            params["tool_choice"] = {"type": "none"}
        try:
            return await self.client.messages.create(**params, timeout=self.request_timeout)
        except anthropic.APIError as exc:
            raise ReasonerError(
                describe_error(exc), partial=self._finish(out, tools), retry_after=_retry_after(exc)
            ) from exc

    # -- prompts ---------------------------------------------------------------------------------------------

    @staticmethod
    def view_for(turn: TurnInput) -> str:
        if turn.trigger == "ask":
            return "joiner" if _SUMMARY.search(turn.question) else "investigation"
        if turn.trigger == "follow_up":
            return "action"
        return "investigation" if turn.state.linked or turn.state.hypotheses else "triage"

    def _prompt(self, turn: TurnInput, view_name: str, view_bytes: int, view_text: str) -> str:
        common = {"scope": turn.scope, "view_name": view_name, "view_bytes": view_bytes, "view": view_text}
        if turn.trigger == "ask":
            return self.prompts.render("ask", question=turn.question, **common)
        task = TASKS.get(turn.trigger, TASKS["default"])
        return self.prompts.render(
            "turn", trigger=turn.trigger, seq_from=turn.seq_from, seq_to=turn.seq_to, task=task, **common
        )

    @staticmethod
    def _actions(turn: TurnInput) -> str:
        if turn.catalog is None:
            return "No action catalog is wired in this process: proposals become suggestions for the humans."
        if not turn.catalog:
            return "None: no action is available, so propose nothing."
        return "\n".join(
            f"- `{a.name}` ({a.risk}): {a.description}"
            + (f" Safety conditions: {', '.join(a.safety_conditions)}." if a.safety_conditions else "")
            for a in turn.catalog
        )

    # -- accounting ------------------------------------------------------------------------------------------

    def _finish(self, out: TurnOutput, tools: Tools, *, keep_intents: bool = True) -> TurnOutput:
        if keep_intents:
            got = tools.collected
            out.hypotheses, out.suggestions = list(got.hypotheses), list(got.suggestions)
            out.obligations, out.proposals = list(got.obligations), list(got.proposals)
        out.cost_usd = usage_cost(out.usage, self.input_usd_per_mtok, self.output_usd_per_mtok)
        return out


async def _tool_results(tools: Tools, blocks: Any) -> list[dict[str, Any]]:
    """Every tool call of one assistant message answered, in order (they go back in ONE user message)."""
    results = []
    for use in [b for b in blocks if b.type == "tool_use"]:
        result = await tools.call(use.name, use.input)
        results.append(
            {"type": "tool_result", "tool_use_id": use.id, "content": result.to_text(), "is_error": result.is_error}
        )
    return results


def usage_cost(u: Usage, input_usd_per_mtok: float, output_usd_per_mtok: float) -> float:
    """USD for ``u``: cache writes at 1.25× and cache reads at 0.1× the input price."""
    return (
        (u.input_tokens + 1.25 * u.cache_creation_input_tokens + 0.1 * u.cache_read_input_tokens) * input_usd_per_mtok
        + u.output_tokens * output_usd_per_mtok
    ) / 1_000_000


def _usage(usage: Any) -> Usage:
    return Usage(
        input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
        cache_read_input_tokens=int(getattr(usage, "cache_read_input_tokens", 0) or 0),
        cache_creation_input_tokens=int(getattr(usage, "cache_creation_input_tokens", 0) or 0),
    )


def _as_param(block: Any) -> dict[str, Any] | None:
    """A response content block as a request content block (what goes back in the next request)."""
    if block.type == "text":
        return {"type": "text", "text": block.text} if block.text else None
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    dumped: dict[str, Any] = block.model_dump(exclude_none=True)
    return dumped


def _retry_after(exc: anthropic.APIError) -> float | None:
    response = getattr(exc, "response", None)
    raw = response.headers.get("retry-after") if response is not None else None
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def describe_error(exc: anthropic.APIError) -> str:
    """One line for the failed turn's entry: what happened, in the terms an on-call engineer uses."""
    wait = _retry_after(exc)
    hint = f", retry-after {wait:g}s" if wait is not None else ""
    if isinstance(exc, anthropic.APITimeoutError):
        return "the model API timed out"
    if isinstance(exc, anthropic.APIConnectionError):
        return "could not reach the model API"
    if isinstance(exc, anthropic.APIStatusError):
        if exc.status_code == 429:
            return f"rate limited by the model API (429{hint})"
        if exc.status_code == 529:
            return f"the model API is overloaded (529{hint})"
        message = getattr(exc, "message", "") or str(exc)
        return f"the model API answered {exc.status_code}: {message[:300]}"
    return f"model API error: {exc}"
