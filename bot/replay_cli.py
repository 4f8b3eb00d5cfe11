"""``decklog replay``: the wiring of core/replay.py in one CLI process, on a virtual clock.

The turn runtime, scheduler and action desk are built as ``decklog serve`` builds them (bot/agents.py,
bot/actions.py), with two differences: every clock is the replay's ``VirtualClock`` and the desk has NO
executors (and this process registers only the index sender), so nothing a replay decides can run. The
reasoner is the one asked for, not the one the environment would pick.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

from decklog.bot.agents import build_reasoner, turn_delays
from decklog.bot.settings import Settings
from decklog.core.agents.context import ContextAgents
from decklog.core.agents.reasoner import Reasoner
from decklog.core.agents.rules import RuleBasedReasoner
from decklog.core.agents.runtime import TurnRuntime
from decklog.core.agents.scheduler import TurnScheduler
from decklog.core.errors import InvalidInput, NotFound
from decklog.core.replay import ReplayResult, VirtualAlarm, VirtualClock, replay_scope

EXIT_OK, EXIT_DIFF = 0, 1


class PastIndex:
    """The index as the source incident saw it: search and the scope list (the related incidents' candidates)
    hide the source itself, the scope it was forked from and every fork, none of which the original agents saw as
    a past or related incident (everything else is the real index)."""

    def __init__(self, index: Any, store: Any, source: str) -> None:
        self._index, self._store, self._source = index, store, source

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)

    async def search(self, text: str, *, limit: int = 20, exclude_scope: str | None = None) -> list[Any]:
        hits = await self._index.search(text, limit=limit, exclude_scope=exclude_scope)
        hidden = {self._source, await self._origin(self._source)}
        return [h for h in hits if h.scope not in hidden and not await self._origin(h.scope)]

    async def list_scopes(self, **kwargs: Any) -> list[Any]:
        """The related-incident candidates (core/views/related.py) without the source, its origin and the forks:
        the source's own runs are not a related incident's, or its replay would never run them again."""
        rows = await self._index.list_scopes(**kwargs)
        hidden = {self._source, await self._origin(self._source)}
        return [r for r in rows if r.id not in hidden and not await self._origin(r.id)]

    async def _origin(self, scope: str) -> str:
        """The scope ``scope`` was forked from ('' when it is no fork)."""
        try:
            return str((await self._store.get_state(scope)).forked_from)
        except NotFound:
            return ""


def pick_reasoner(settings: Settings, name: str) -> Reasoner:
    """``rules`` or ``claude`` (needs ANTHROPIC_API_KEY). There is no recorded reasoner: decklog keeps no
    recording of a model's answers that a replay could play back."""
    from decklog.bot.config import load_config

    cfg = load_config(settings.resolved_config_path).agents
    if name == "rules":
        return RuleBasedReasoner(idle_nudge_minutes=cfg.idle_nudge_minutes, **cfg.rules.reasoner_args())
    if name == "claude":
        if settings.anthropic_api_key is None:
            raise InvalidInput("--reasoner claude needs ANTHROPIC_API_KEY (nothing was forked)", field="reasoner")
        return build_reasoner(settings, cfg)
    raise InvalidInput(f"--reasoner must be rules or claude, not {name!r}", field="reasoner")


async def run_replay(settings: Settings, scope: str, *, at: int | None, reasoner: str, fail_on_diff: bool) -> int:
    from decklog.bot.actions import AgentCatalog, build_catalog, build_policy
    from decklog.bot.runtime import Runtime
    from decklog.core.actions import ActionDesk

    chosen = pick_reasoner(settings, reasoner)  # before anything is opened: a bad choice writes nothing
    clock = VirtualClock(datetime(1970, 1, 1, tzinfo=UTC))
    alarm = VirtualAlarm(clock)
    rt = await Runtime.open(settings, clock=clock)
    rt.dispatcher.start()
    try:
        cfg = rt.config.agents
        past: Any = PastIndex(rt.index, rt.store, scope)
        desk = ActionDesk(
            rt.store,
            past,  # its related-incident condition counts only other incidents, as the agents' views do
            # Nothing runs in a replay, so an action counts as configured even where its executor URL is not
            # set in this environment (the original server had it): the reasoner may propose it again.
            build_catalog(_every_action(rt.settings), rt.config),
            {},  # no executors: a replay never acts on the world
            build_policy(rt.settings, rt.config),
            clock=clock,
            lease_seconds=rt.config.obligations.lease_seconds,
        )
        turns = TurnRuntime(
            rt.store,
            reasoner=chosen,
            clock=clock,
            index=past,
            budget=cfg.view_budget_bytes,
            timeout_s=cfg.turn_timeout_s,
            proposer=desk,
            catalog=AgentCatalog(desk),
            context=ContextAgents(rt.store, past, clock=clock, link_window_hours=rt.config.changes.link_window_hours),
            lease_seconds=rt.config.obligations.lease_seconds,
            change_window_hours=rt.config.changes.link_window_hours,
        )
        first_delay, debounce = turn_delays(rt.settings, cfg)
        scheduler = TurnScheduler(
            turns, alarm, first_delay=first_delay, debounce=debounce, max_wait=rt.settings.turn_max_wait, clock=clock
        )
        try:
            result = await replay_scope(rt.store, rt.index, scope, at=at, clock=clock, alarm=alarm, scheduler=scheduler)
        finally:
            await scheduler.stop()
            client = getattr(chosen, "client", None)
            if client is not None:
                await client.close()
        rt.dispatcher.wake(result.fork, ["index"])
        await rt.dispatcher.idle()
    finally:
        await rt.close()
    _print(result, reasoner)
    return EXIT_DIFF if fail_on_diff and not result.diff.same else EXIT_OK


def _lost(d: Any) -> int:
    return sum(1 for line in d.lines if line.startswith("- "))


def _every_action(settings: Settings) -> Settings:
    placeholder = "http://replay.invalid"  # never called: the replay's desk has no executors
    return settings.model_copy(
        update={
            "deploy_api_url": settings.deploy_api_url or placeholder,
            "statuspage_api_url": settings.statuspage_api_url or placeholder,
        }
    )


def _print(result: ReplayResult, reasoner: str) -> None:
    d = result.diff
    print(result.fork)
    print(
        f"replayed {result.source} from seq {result.at} with the {reasoner} reasoner: {result.inputs} recorded "
        f"inputs ({result.skipped} skipped: answers to decisions the replay did not make); "
        f"{len(d.original)} agent decisions originally, {len(d.replayed)} in the replay, "
        f"{len(d.original) - _lost(d)} of the original reproduced"
    )
    if d.same:
        print("no difference in the agents' decisions")
        return
    print(f"{len(d.lines)} differences (- original only, + replay only):")
    for line in d.lines:
        print(line)
    print(
        "note: after the first divergence the recorded inputs no longer match what the world would have done",
        file=sys.stderr,
    )
