"""The egress allowlist (core/egress.py): the matching rules, the default (the configured executor hosts), and
the executors refusing a host before anything is sent — over real loopback HTTP against the fake services, with
the refusal recorded on the incident as a definite ``failed`` result."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

from decklog.adapters.executors.http import HttpExecutor
from decklog.adapters.executors.statuspage import StatuspageExecutor
from decklog.adapters.local.services import FakeDeployService, FakeStatuspage
from decklog.bot.actions import build_catalog, build_egress
from decklog.bot.config import DecklogConfig, load_config
from decklog.bot.server import DecklogServer
from decklog.bot.settings import Settings, SettingsError
from decklog.core.actions import ExecutionRequest
from decklog.core.egress import EgressPolicy, check, parse_rule
from decklog.core.errors import InvalidInput
from tests.actions_support import AGENT, desk_kit, effect_action, pid_of
from tests.conftest import test_config

REQ = ExecutionRequest("poke", {"target": "x"}, "incident/x", "run-1", 1, "run-1-f1-abc")


def _config(security: dict[str, Any], actions: list[dict[str, Any]]) -> DecklogConfig:
    return DecklogConfig.model_validate({**test_config().model_dump(), "security": security, "actions": actions})


def _allowed(entries: list[str], url: str) -> bool:
    return check(EgressPolicy.from_entries(entries), url) is None


def test_hosts_compare_case_insensitively_and_a_port_given_must_match() -> None:
    assert _allowed(["Deploy.Internal"], "http://deploy.internal/rollback")
    assert _allowed(["deploy.internal"], "https://DEPLOY.INTERNAL.:8443/x")  # any port; trailing dot ignored
    assert _allowed(["deploy.internal:8080"], "http://deploy.internal:8080/x")
    assert not _allowed(["deploy.internal:8080"], "http://deploy.internal:8081/x")
    assert not _allowed(["deploy.internal:8080"], "http://deploy.internal/x")  # port 80
    assert _allowed(["deploy.internal:443"], "https://deploy.internal/x")
    assert not _allowed(["deploy.internal"], "http://deploy.internal.evil.com/x")
    assert not _allowed(["deploy.internal"], "http://evil.com/?deploy.internal")
    assert _allowed(["[::1]:8080"], "http://[::1]:8080/x") and not _allowed(["[::1]:8080"], "http://[::2]:8080/x")
    assert not _allowed(["localhost"], "http://127.0.0.1/x")  # no name resolution


def test_a_leading_star_dot_matches_subdomains_only() -> None:
    assert _allowed(["*.statuspage.io"], "https://api.statuspage.io/v1")
    assert _allowed(["*.statuspage.io"], "https://a.b.statuspage.io/v1")
    assert not _allowed(["*.statuspage.io"], "https://statuspage.io/v1")
    assert not _allowed(["*.statuspage.io"], "https://evilstatuspage.io/v1")
    assert not _allowed(["*.statuspage.io:443"], "https://api.statuspage.io:8443/v1")


@pytest.mark.parametrize("bad", ["", "*", "*.", "api.*.io", "de*ploy.internal", "http://h/x", "u@h", "h:99999", "h:x"])
def test_a_malformed_entry_is_refused(bad: str) -> None:
    with pytest.raises(InvalidInput):
        parse_rule(bad)


def test_the_refusal_names_the_host_and_the_policy_and_hides_a_url_key() -> None:
    policy = EgressPolicy.from_entries(["deploy.internal:8080"])
    refusal = check(policy, "https://KEY@api.statuspage.io/v1/pages/p")
    assert refusal is not None and refusal.host == "api.statuspage.io:443"
    assert "KEY" not in refusal.url and "KEY" not in refusal.reason
    assert "[security] egress_allow" in refusal.reason and "deploy.internal:8080" in refusal.reason
    assert "nothing was sent" in refusal.reason
    assert check(policy, "ftp://deploy.internal:8080/x") is not None
    assert check(EgressPolicy.from_entries([]), "http://deploy.internal:8080/x") is not None  # [] allows nothing


def test_the_default_is_exactly_the_configured_executor_hosts() -> None:
    """Key absent: DECKLOG_DEPLOY_API_URL, DECKLOG_STATUSPAGE_API_URL and the catalog's url / reconcile_url hosts,
    each with its port — nothing else (not another port, not a subdomain, not localhost for 127.0.0.1)."""
    config = _config(
        {},
        [
            {**effect_action(), "executor": {"type": "http", "url": "http://hooks.internal:9000/poke"}},
            {
                **effect_action("lookup"),
                "executor": {
                    "type": "http",
                    "url": "http://127.0.0.1:7000/e",
                    "reconcile_url": "http://Audit.Internal/r",
                },
            },
        ],
    )
    settings = SimpleNamespace(
        deploy_api_url="http://deploy.internal:8080/",
        statuspage_api_url="https://api.statuspage.io",
        executor_timeout=None,
        pagerduty_events_url="https://events.pagerduty.com/v2/enqueue",
        pagerduty_routing_key=None,  # page_oncall unavailable: its host is not allowed by default
    )
    policy = build_egress(settings, config, build_catalog(settings, config))  # type: ignore[arg-type]
    assert config.security.egress_allow is None
    assert sorted(str(r) for r in policy.rules) == [
        "127.0.0.1:7000",
        "api.statuspage.io:443",
        "audit.internal:80",
        "deploy.internal:8080",
        "hooks.internal:9000",
    ]
    for url in (
        "http://deploy.internal:8080/rollback",
        "https://api.statuspage.io/v1/pages/p",
        "http://audit.internal/r/k",
    ):
        assert check(policy, url) is None, url
    for url in (
        "http://deploy.internal:8081/",
        "http://x.deploy.internal:8080/",
        "http://localhost:7000/",
        "http://evil/",
    ):
        assert check(policy, url) is not None, url
    explicit = test_config(security={"egress_allow": ["hooks.internal"]})
    only = build_egress(settings, explicit, build_catalog(settings, explicit))  # type: ignore[arg-type]
    assert [str(r) for r in only.rules] == ["hooks.internal"]
    assert check(only, "http://deploy.internal:8080/rollback") is not None


def test_a_bad_entry_in_decklog_toml_stops_start_up_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "decklog.toml"
    path.write_text('[security]\negress_allow = ["deploy.internal", "api.*.io"]\n')
    with pytest.raises(SettingsError, match=r"security\.egress_allow.*only wildcard"):
        load_config(path)
    path.write_text('[security]\negress_allow = ["deploy.internal:8080", "*.statuspage.io"]\n')
    assert load_config(path).security.egress_allow == ("deploy.internal:8080", "*.statuspage.io")


async def _run_under(tmp_path: Path, allow: list[str]) -> tuple[list[Any], FakeDeployService]:
    """Run the ``poke`` action (``${DEPLOY}/effect``: the fake on 127.0.0.1) under the allowlist ``allow``."""
    fake = FakeDeployService(extra_paths=("/effect",))
    async with desk_kit(
        tmp_path, actions=[effect_action()], deploy=fake, egress=EgressPolicy.from_entries(allow)
    ) as kit:
        scope = await kit.declare()
        line = await kit.desk.propose(
            scope, action="poke", params={"target": "db-1"}, rationale="t", obligation_id=None, actor=AGENT
        )
        report = await kit.desk.execute(scope, pid_of(line), receipt="test")
        results = await kit.payloads(scope, "action_result")
        assert results[-1].outcome == report.status
        state = await kit.state(scope)
        assert not state.runs and not state.obligations and not state.proposals  # settled, nothing left open
        return results, fake


async def test_a_catalog_action_on_a_host_not_allowed_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    results, fake = await _run_under(tmp_path / "refused", ["localhost", "*.127.0.0.1"])
    assert fake.calls == [] and fake.effects == []  # the fake listens on 127.0.0.1: only the check stood between
    (result,) = results  # one definite result: no "uncertain", no reconcile
    assert result.outcome == "failed" and not result.reconciled
    assert result.error.startswith("egress refused: 127.0.0.1:") and "(allowed: localhost, *.127.0.0.1)" in result.error
    assert result.response["egress_refused"]["host"].startswith("127.0.0.1:")
    # the control: allowing the host lets the same action through to the same kind of fake
    results, fake = await _run_under(tmp_path / "allowed", ["localhost", "127.0.0.1"])
    assert [r.outcome for r in results] == ["applied"] and len(fake.effects) == 1


async def test_the_reconcile_lookup_goes_through_the_allowlist_too(tmp_path: Path) -> None:
    async with FakeDeployService(extra_paths=("/effect",)) as fake, aiohttp.ClientSession() as session:
        port = fake.base_url.rsplit(":", 1)[1]
        policy = EgressPolicy.from_entries([f"127.0.0.1:{port}"])
        ex = HttpExecutor(
            session,
            url=fake.base_url + "/effect",
            reconcile_url=f"http://localhost:{port}/reconcile",
            timeout=2,
            egress=policy,
        )
        rec = await ex.reconcile(REQ)
        assert rec.status == "unknown" and "egress refused: localhost:" in rec.error
        assert fake.calls == []
        assert (await ex.execute(REQ)).outcome == "applied" and [c.path for c in fake.calls] == ["/effect"]


async def test_without_a_policy_an_executor_may_call_only_its_own_hosts(tmp_path: Path) -> None:
    async with FakeDeployService(extra_paths=("/effect",)) as fake, aiohttp.ClientSession() as session:
        port = fake.base_url.rsplit(":", 1)[1]
        ex = HttpExecutor(session, url=fake.base_url + "/effect", reconcile_url=f"http://localhost:{port}/reconcile")
        assert [str(r) for r in ex.egress.rules] == [f"127.0.0.1:{port}", f"localhost:{port}"]


async def test_statuspage_is_refused_before_its_first_request(tmp_path: Path) -> None:
    async with FakeStatuspage(api_key="sp-key", page_id="page1") as page, aiohttp.ClientSession() as session:
        port = page.base_url.rsplit(":", 1)[1]
        url = f"http://sp-key@localhost:{port}/v1/pages/page1"
        ex = StatuspageExecutor(session, url=url, timeout=2, egress=EgressPolicy.from_entries(["127.0.0.1"]))
        out = await ex.execute(REQ)
        assert out.outcome == "failed" and "egress refused: localhost:" in out.error and "sp-key" not in out.error
        assert (await ex.reconcile(REQ)).status == "unknown"
        assert page.calls == [] and page.incidents == []
        allowed = StatuspageExecutor(session, url=url, timeout=2, egress=EgressPolicy.from_entries(["localhost"]))
        assert (await allowed.execute(REQ)).outcome == "applied" and len(page.incidents) == 1


async def test_serve_wires_the_configured_allowlist_into_every_executor(tmp_path: Path) -> None:
    async with FakeDeployService() as deploy:
        for allow, expect in ((None, deploy.base_url), (["deploy.example.com"], "")):
            security = {} if allow is None else {"egress_allow": allow}
            settings = Settings(
                data_dir=tmp_path / str(bool(allow)), host="127.0.0.1", port=0, deploy_api_url=deploy.base_url
            )
            srv = DecklogServer(settings, config=test_config(security=security), parts={"actions"})
            await srv.start()
            try:
                assert srv.parts.actions is not None
                executors = srv.parts.actions.desk.runner.executors
                assert executors, "the example catalog has actions on DECKLOG_DEPLOY_API_URL"
                for executor in executors.values():
                    allowed = check(executor.egress, deploy.rollback_url) is None
                    assert allowed == bool(expect), (allow, executor.egress)
            finally:
                await srv.stop()
