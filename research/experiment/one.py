"""One run in its own data directory (so `decklog timeline` / `export` work on it), with the chosen model."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from decklog.bot.actions import AgentCatalog
from decklog.bot.agents import turn_delays
from decklog.bot.config import DecklogConfig, load_config
from decklog.bot.runtime import Runtime
from decklog.bot.settings import Settings, load_settings
from decklog.core.clock import ManualClock
from decklog.core.entries import Entry
from research.experiment import desk_hands, policy
from research.experiment.desk import ExperimentDesk, attach_desk
from research.experiment.drive import drive
from research.experiment.inputs import TOKEN, HttpInputs
from research.experiment.judge import judge
from research.experiment.run import Model, Run, Spec
from research.experiment.scenario import action_key
from research.experiment.slack_door import SlackDoor
from research.experiment.turns import Agents
from research.experiment.view import usage_for


def scripted_model(mutation: str) -> Model:
    sent = {"prefix": -1}

    async def call(system: str, view: str, scope: str) -> tuple[str, dict[str, int]]:
        prompt = system + "\n" + view
        answer = json.dumps(policy.decide(view, mutation), sort_keys=True)
        usage = usage_for(prompt, answer, max(sent["prefix"], len(system)) if sent["prefix"] >= 0 else 0)
        sent["prefix"] = len(prompt.encode())
        return answer, usage

    return call


def _distinct_fulfilled(logs: Mapping[str, Sequence[Entry]]) -> int:
    actions: dict[str, str] = {}
    done: set[str] = set()
    for es in logs.values():
        for e in es:
            p = e.payload.model_dump()
            if e.kind == "obligation_opened":
                actions[p["obligation_id"]] = action_key(p["action"] or "", p["params"] or {})
            elif e.kind == "obligation_fulfilled":
                done.add(actions.get(p["obligation_id"], p["obligation_id"]))
    return len(done)


def experiment_config(settings: Settings) -> DecklogConfig:
    """decklog.toml as loaded, without Slack's per-channel pacing and header-update spacing (wall-clock waits: a
    run is on a virtual clock, and its posts go to a fake workspace that never rate-limits)."""
    config = load_config(settings.resolved_config_path)
    slack = config.slack.model_copy(update={"pace_per_channel_s": 0.0, "header_update_interval_s": 0.0})
    return config.model_copy(update={"slack": slack})


async def run_one(spec: Spec, data_dir: Path, model_name: str) -> dict[str, Any]:
    # The scenarios' timelines and the published table assume the first turn 60 s after the declaration (the
    # product's default before decision 155 made it 15 s); the experiment keeps that, so its results stay comparable.
    settings = load_settings(
        data_dir=data_dir, database_url=None, DECKLOG_ALERT_TOKEN=TOKEN, DECKLOG_FIRST_TURN_DELAY="60"
    )
    clock = ManualClock()
    rt = await Runtime.open(settings, config=experiment_config(settings), clock=clock)
    inputs = HttpInputs(rt, await SlackDoor.open(rt))
    rt.dispatcher.start()
    http = None
    desk: ExperimentDesk | None = None
    try:
        await inputs.start()
        if model_name == "scripted":
            model = scripted_model(spec.mutation)
        else:
            from research.experiment.http_model import HttpModel

            http = HttpModel(model_name, spec.mutation, rt.store, clock)
            await http.start()
            model = http.call
        run = Run(spec, rt.store, inputs, clock, model, data_dir / "journal")
        # ``rules``: decklog's TurnScheduler, armed by the dispatcher's ``agents`` sender, with the product's delays
        run.dispatcher = rt.dispatcher
        run.delays = (*turn_delays(settings, rt.config.agents), settings.turn_max_wait)
        desk = await attach_desk(run, rt)
        assert run.desk is not None
        inputs.slack.attach(run.desk, [desk_hands.APPROVER])
        run.agents = Agents(run, rt.index, AgentCatalog(run.desk))
        await drive(run)
        logs = {s: await rt.store.read(s) for s in run.scopes}
        verdict = judge(logs, run.world.counters(), spec.scenario)
        for scope in run.scopes:
            rt.dispatcher.wake(scope, ["index"])
        await rt.dispatcher.idle()
        slack = inputs.slack.stats()
    finally:
        if desk:
            await desk.stop()
        if http:
            await http.stop()
        await inputs.stop()
        await rt.close()
    return {**row(spec, model_name, run, logs, verdict, data_dir), "slack": slack}


def row(
    spec: Spec,
    model_name: str,
    run: Run,
    logs: Mapping[str, Sequence[Entry]],
    verdict: dict[str, Any],
    data_dir: Path,
) -> dict[str, Any]:
    """One results.jsonl line: the verdict, the cost (tokens, bytes, $) and the units of work."""
    c = run.cost
    units = _distinct_fulfilled(logs)  # a duplicate effect is not a unit of work
    units += int(verdict["checks"]["root_cause"]) + int(bool(run.world.mitigated)) + int(verdict["checks"]["goal"])
    return {
        "arm": spec.arm,
        "scenario": spec.scenario.id,
        "fault": spec.fault,
        "seed": spec.seed,
        "fences": spec.fences,
        "model": model_name,
        "correct": verdict["correct"],
        "checks": verdict["checks"],
        "duplicate_effects": verdict["duplicate_effects"],
        "harmful_effects": verdict["harmful_effects"],
        "reproposed_denied": verdict["reproposed_denied"],
        "tokens": c.tokens,
        "input_tokens": c.input_tokens,
        "output_tokens": c.output_tokens,
        "cache_read_input_tokens": c.cache_read_input_tokens,
        "cache_creation_input_tokens": c.cache_creation_input_tokens,
        "model_calls": c.calls,
        "context_bytes": c.context_bytes,
        "reconstruction_bytes": c.reconstruction_bytes,
        "usd": round(c.usd, 6),
        "units": units,
        "tokens_per_unit": round(c.tokens / units, 1) if units else None,
        "bytes_per_unit": round(c.context_bytes / units, 1) if units else None,
        "usd_per_unit": round(c.usd / units, 6) if units else None,
        "entries": sum(len(es) for es in logs.values()),
        "scopes": run.scopes,
        "data_dir": str(data_dir),
    }
