"""The experiment's action desk: decklog's real ``ActionDesk`` and ``Runner``, with a catalog built from the
scenario (``research/experiment/catalog.py``), ``http`` executors (behind their default egress rule: exactly the
world's loopback host) aimed at the world on loopback (``world_http.py``), and one scripted approver."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

from decklog.adapters.executors import build_executor
from decklog.bot.runtime import Runtime
from decklog.core.actions import ActionDesk, ApproverPolicy, RunAuthority, Runner
from research.experiment import catalog as scenario_catalog
from research.experiment import desk_hands
from research.experiment.fenceless import FencelessRunner
from research.experiment.hands import LEASE
from research.experiment.run import Run
from research.experiment.world_http import WorldApp


@dataclass
class ExperimentDesk:
    world: WorldApp
    session: aiohttp.ClientSession

    async def stop(self) -> None:
        await self.session.close()
        await self.world.stop()


async def attach_desk(run: Run, rt: Runtime) -> ExperimentDesk:
    """Start the world's HTTP target and give ``run`` a desk that reaches it (``run.desk``)."""
    world = WorldApp(run.world, run.executor_fault)
    await world.start()
    session = aiohttp.ClientSession()
    catalog = scenario_catalog.build(run.spec.scenario, world.base)
    executors = {a.name: build_executor(a.executor, session) for a in catalog}

    async def checkpoint(point: str, auth: RunAuthority) -> None:
        await desk_hands.checkpoint(run, point, auth)

    run.desk = ActionDesk(
        rt.store,
        rt.index,
        catalog,
        executors,
        ApproverPolicy(approvers=(desk_hands.APPROVER.id,)),
        clock=run.clock,
        lease_seconds=LEASE,
        checkpoint=checkpoint,
        runner=Runner if run.spec.fences else FencelessRunner,
    )
    return ExperimentDesk(world, session)
