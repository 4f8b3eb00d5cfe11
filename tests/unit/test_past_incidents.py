"""Past incidents like the one at hand (core/agents/past.py), through the real paths: incidents declared and alerted
through the scope service, hypotheses confirmed or ruled out with ``answer_finding``, a rollback proposed, approved,
run against the fake deploy service and verified by the action desk, resolutions with a summary, a fork; the
index fed by the real dispatcher. Then what matches, what each teaches, and what the model's tool answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from decklog.core.agents.answers import answer_finding
from decklog.core.agents.past import similar_incidents
from decklog.core.agents.tools import ToolBox
from decklog.core.agents.turn_parts import TurnViews
from decklog.core.entries import Actor, Hypothesis, NewEntry
from decklog.core.fork import fork_scope
from tests.actions_support import AGENT, ALICE, Kit, desk_kit, pid_of

ALERTS = Actor.system("alertmanager")


async def _incident(kit: Kit, title: str, service: str, alert: str, alertname: str = "", fp: str = "") -> str:
    scope = await kit.declare(title, services=[service])
    payload: dict[str, Any] = {
        "text": alert,
        "source": "alertmanager",
        "service": service,
        "fingerprint": fp or f"fp-{scope.split('/')[-1]}",
        "alert_status": "firing",
        "labels": {"alertname": alertname} if alertname else {},
    }
    await kit.service.record(scope, "observation", payload, ALERTS)
    return scope


async def _hypothesis(kit: Kit, scope: str, text: str, subject: str) -> int:
    result = await kit.store.append(
        scope, [NewEntry.make("hypothesis", AGENT, Hypothesis(text=text, subject=subject, rank=1, confidence=0.5))]
    )
    return result.entries[0].seq


async def _rolled_back_and_verified(kit: Kit, scope: str, change: str) -> str:
    line = await kit.desk.propose(
        scope,
        action="rollback_deploy",
        params={"service": "payments", "change": change},
        rationale="",
        obligation_id=None,
        actor=AGENT,
    )
    await kit.slack.decide(scope=scope, proposal_id=pid_of(line), approve=True, actor=ALICE, reason="", key=scope)
    report = await kit.desk.execute(scope, pid_of(line), receipt="t")
    assert report.status == "applied"
    await kit.alert(scope, "resolved", fp=f"fp-{scope.split('/')[-1]}")
    assert [v.outcome for v in await kit.desk.verify(scope)] == ["verified"]
    return report.run_id


async def _history(kit: Kit) -> dict[str, str]:
    """Past incidents: a confirmed bad deploy rolled back and verified; a ruled-out guess then a resolution that
    names the cause; the same alert name on another service; an unrelated one; a fork of the first."""
    made: dict[str, str] = {}
    made["deploy"] = await _incident(kit, "Payments 5xx", "payments", "payments 5xx above 5%", "PaymentsErrors")
    change = await kit.change(made["deploy"])
    seq = await _hypothesis(kit, made["deploy"], f"suspect {change}: the deploy broke payments", change)
    await answer_finding(kit.store, made["deploy"], seq, "confirmed", ALICE, now=kit.clock.now())
    await _rolled_back_and_verified(kit, made["deploy"], change)
    await kit.service.resolve(made["deploy"], ALICE, summary="rolled back")

    made["pool"] = await _incident(kit, "Payments errors", "payments", "payments 5xx above 5%", "PaymentsErrors")
    seq = await _hypothesis(kit, made["pool"], "suspect payments", "payments")
    await answer_finding(kit.store, made["pool"], seq, "confirmed", ALICE, now=kit.clock.now())
    await answer_finding(kit.store, made["pool"], seq, "ruled_out", ALICE, now=kit.clock.now(), key="again")
    await kit.service.resolve(made["pool"], ALICE, summary="the payments-db connection pool was exhausted")

    made["elsewhere"] = await _incident(kit, "Checkout down", "checkout", "checkout answers 503", "PaymentsErrors")
    made["unrelated"] = await _incident(kit, "Disk full", "search", "search disk 95% full", "DiskFull")
    await kit.service.resolve(made["unrelated"], ALICE, summary="cleaned the disk")
    version = (await kit.state(made["deploy"])).version
    made["fork"] = (await fork_scope(kit.store, kit.index, made["deploy"], at=version)).scope
    await kit.settle()
    return made


async def test_past_incidents_match_by_signature_and_say_what_caused_and_fixed_them(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        made = await _history(kit)
        now = await _incident(kit, "Payments failing", "payments", "payments 5xx above 7%", "PaymentsErrors")
        await kit.settle()
        found = await similar_incidents(kit.store, kit.index, await kit.state(now), limit=10)
        by_scope = {p.scope: p for p in found}
        assert made["unrelated"] not in by_scope and made["fork"] not in by_scope and now not in by_scope
        assert [p.scope for p in found[:2]] == sorted([made["deploy"], made["pool"]]), [p.summary() for p in found]
        deploy, pool, elsewhere = by_scope[made["deploy"]], by_scope[made["pool"]], by_scope[made["elsewhere"]]
        assert "same signature" in deploy.matched and deploy.pair_services == ("payments",)
        assert elsewhere.matched[0] == "alert paymentserrors" and elsewhere.similarity < deploy.similarity
        # the confirmed hypothesis is the cause; the verified rollback is the fix
        assert deploy.lesson.cause_from == "confirmed" and deploy.lesson.subject == "change/r2026-09-19-4"
        assert [(f.action, f.params) for f in deploy.lesson.fixes] == [
            ("rollback_deploy", {"service": "payments", "change": "change/r2026-09-19-4"})
        ]
        assert deploy.names("payments") and not deploy.names("payments-db")
        # confirmed, then ruled out: the resolution's summary is the cause, and it names the pool's service
        assert (pool.lesson.cause_from, pool.lesson.cause) == (
            "resolution",
            "the payments-db connection pool was exhausted",
        )
        assert not pool.lesson.fixes and pool.names("payments-db") and not pool.names("payments")
        assert elsewhere.lesson.empty
        assert "fixed by rollback_deploy(change=change/r2026-09-19-4,service=payments)" in deploy.summary()


async def test_the_models_tool_gives_past_incidents_with_their_cause_and_fix(tmp_path: Path) -> None:
    async with desk_kit(tmp_path) as kit:
        made = await _history(kit)
        now = await _incident(kit, "Payments failing", "payments", "payments 5xx above 7%", "PaymentsErrors")
        await kit.settle()
        state = await kit.state(now)
        tools = ToolBox(
            store=kit.store, state=state, views=TurnViews(kit.store, state, 4000), now=kit.clock.now(), index=kit.index
        )
        by_signature = await tools.call("search_similar_incidents", {})
        assert by_signature.status == "success", by_signature
        rows = {r["scope"]: r for r in by_signature.data}
        assert rows[made["deploy"]]["fixed_by"][0]["action"] == "rollback_deploy"
        assert rows[made["deploy"]]["cause_subject"] == "change/r2026-09-19-4"
        by_words = await tools.call("search_similar_incidents", {"query": "connection pool"})
        assert by_words.status == "success", by_words
        (row,) = [r for r in by_words.data if r["scope"] == made["pool"]]
        assert row["cause_from"] == "resolution" and "pool was exhausted" in row["cause"]
        alone = await _incident(kit, "Mail bounced", "mail", "mail bounce rate high", "MailBounces")
        await kit.settle()
        state = await kit.state(alone)
        tools = ToolBox(
            store=kit.store, state=state, views=TurnViews(kit.store, state, 4000), now=kit.clock.now(), index=kit.index
        )
        assert (await tools.call("search_similar_incidents", {})).status == "no_data"
