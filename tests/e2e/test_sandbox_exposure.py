"""What keeps the sandbox from being an open door: it serves on loopback only unless DECKLOG_SANDBOX_PUBLIC=1, its
people never approve for an executor the sandbox did not start, and its state-changing endpoints need the same
origin and the page's per-run token."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from decklog.adapters.http.hosts import is_loopback_host
from decklog.adapters.local.services import FakeDeployService
from decklog.bot.actions import build_policy, origin_of
from decklog.bot.cli import main
from decklog.bot.server import DecklogServer
from decklog.bot.settings import Settings, SettingsError
from tests.conftest import ServerFactory, test_config


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.9.8.7", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LocalHost.", True),
        ("api.localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("example.com", False),
        ("localhost.example.com", False),
    ],
)
def test_what_counts_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


async def test_a_public_host_without_slack_credentials_stops_start_up(tmp_path: Path) -> None:
    server = DecklogServer(Settings(data_dir=tmp_path / "data", host="0.0.0.0", port=0), config=test_config())
    with pytest.raises(SettingsError) as caught:
        await server.start()
    message = str(caught.value)
    assert "DECKLOG_HOST=0.0.0.0" in message and "DECKLOG_SANDBOX_PUBLIC=1" in message
    assert "SLACK_BOT_TOKEN" in message
    assert not (tmp_path / "data" / "sandbox").exists()  # nothing of the sandbox was started


def test_decklog_serve_refuses_with_one_message_naming_the_opt_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DECKLOG_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DECKLOG_HOST", "0.0.0.0")
    monkeypatch.setenv("DECKLOG_PORT", "0")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("decklog: configuration error: DECKLOG_HOST=0.0.0.0") and err.count("\n") == 1
    assert "DECKLOG_SANDBOX_PUBLIC=1" in err


async def test_opting_in_serves_publicly_with_a_loud_warning(
    make_server: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="decklog"):
        server = await make_server(host="0.0.0.0", sandbox_public=True)
    assert server.mode == "sandbox" and server.parts.page is not None
    warned = [r.getMessage() for r in caplog.records if "DECKLOG_SANDBOX_PUBLIC=1" in r.getMessage()]
    assert warned and "WITHOUT authentication" in warned[0] and r"0.0.0.0" in warned[0]


def test_the_opt_in_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().sandbox_public is False
    monkeypatch.setenv("DECKLOG_SANDBOX_PUBLIC", "1")
    assert Settings().sandbox_public is True
    monkeypatch.setenv("DECKLOG_SANDBOX_PUBLIC", "maybe")
    with pytest.raises(ValueError):
        Settings()


async def test_a_loopback_host_needs_no_opt_in(make_server: ServerFactory) -> None:
    server = await make_server(host="localhost")
    assert server.parts.page is not None


# -- approvers ----------------------------------------------------------------------------------------------------


def test_origin_of_names_host_and_port() -> None:
    assert origin_of("https://KEY@Deploy.Example.com/v1") == "deploy.example.com:443"
    assert origin_of("http://127.0.0.1:9/x") == "127.0.0.1:9"
    assert origin_of("http://[::1]:8/x") == "[::1]:8"
    assert origin_of("ftp://x/y") is None and origin_of("") is None


async def test_sandbox_people_approve_only_for_the_sandboxs_own_fakes(make_server: ServerFactory) -> None:
    server = await make_server()
    assert server.settings.approver_ids == ("U0ALICE", "U0BOB", "U0CAROL")
    assert build_policy(server.settings, server.config).approvers == ("U0ALICE", "U0BOB", "U0CAROL")


@pytest.mark.parametrize("setting", ["deploy_api_url", "statuspage_api_url"])
async def test_sandbox_people_are_never_approvers_for_a_real_executor_url(
    make_server: ServerFactory, setting: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A deploy service the operator runs is real even on loopback: approving from the page would act on it."""
    operator = FakeDeployService(host="127.0.0.1")
    url = await operator.start()
    try:
        if setting == "statuspage_api_url":
            url = f"http://key@{url.removeprefix('http://')}/v1/pages/p1"
        with caplog.at_level(logging.WARNING, logger="decklog"):
            server = await make_server(**{setting: url})
        assert getattr(server.settings, setting) == url
        assert server.settings.approver_ids == ()
        assert build_policy(server.settings, server.config).approvers == ()
        assert server.parts.page is not None and server.parts.page.page.info()["approvers"] == []
        host = url.split("@")[-1].removeprefix("http://").split("/")[0]
        assert any("NOT approvers" in r.getMessage() and host in r.getMessage() for r in caplog.records)
        assert not any("key@" in r.getMessage() for r in caplog.records)  # the status page key is never logged
    finally:
        await operator.stop()


async def test_configured_approvers_are_kept_with_a_real_url(make_server: ServerFactory) -> None:
    server = await make_server(deploy_api_url="http://127.0.0.1:9/deploys", approvers="U0BOB")
    assert server.settings.approver_ids == ("U0BOB",)


# -- same origin and the page token -------------------------------------------------------------------------------


async def _page_token(http: aiohttp.ClientSession, server: DecklogServer) -> str:
    async with http.get(server.url + "/") as response:
        html = await response.text()
    marker = '<meta name="decklog-sandbox-token" content="'
    assert marker in html
    return html.split(marker, 1)[1].split('"', 1)[0]


async def _post(http: aiohttp.ClientSession, server: DecklogServer, headers: dict[str, str]) -> tuple[int, Any]:
    body = {"user": "bob", "channel": "C0GENERAL", "text": "hello"}
    async with http.post(server.url + "/sandbox/message", json=body, headers=headers) as response:
        return response.status, await response.json()


async def test_state_changing_endpoints_need_same_origin_and_the_page_token(make_server: ServerFactory) -> None:
    server = await make_server()
    async with aiohttp.ClientSession() as http:
        token = await _page_token(http, server)
        assert len(token) >= 32 and token == server.parts.page.page.token  # type: ignore[union-attr]
        same = {"Origin": server.url, "X-Decklog-Sandbox-Token": token}
        refused: list[tuple[dict[str, str], str]] = [
            ({}, "token"),
            ({"Origin": server.url}, "token"),
            ({"Origin": server.url, "X-Decklog-Sandbox-Token": "x" * 43}, "token"),
            ({"Origin": "http://evil.example", "X-Decklog-Sandbox-Token": token}, "origin"),
            ({"Origin": "null", "X-Decklog-Sandbox-Token": token}, "origin"),
            ({"Sec-Fetch-Site": "cross-site", "X-Decklog-Sandbox-Token": token}, "cross-site"),
            ({"Sec-Fetch-Site": "same-site", "Origin": server.url, "X-Decklog-Sandbox-Token": token}, "same-site"),
        ]
        for headers, reason in refused:
            status, body = await _post(http, server, headers)
            assert status == 403 and reason in body["error"], headers
        assert not [m for m in server.sandbox.workspace.history("C0GENERAL") if m.text == "hello"]  # type: ignore[union-attr]
        status, body = await _post(http, server, {**same, "Sec-Fetch-Site": "same-origin"})
        assert status == 200 and body["ok"], body
        # Without Origin (a same-origin fetch always sends it on POST; a non-browser client may not), the token
        # alone is enough: a cross-site page cannot read it.
        status, body = await _post(http, server, {"X-Decklog-Sandbox-Token": token})
        assert status == 200 and body["ok"], body
        async with http.get(server.url + "/sandbox/state") as response:
            assert response.status == 200  # reading stays open on loopback (the page loads it)


async def test_each_run_has_its_own_token(make_server: ServerFactory, tmp_path: Path) -> None:
    first = await make_server(data_dir=tmp_path / "one")
    second = await make_server(data_dir=tmp_path / "two")
    assert first.parts.page is not None and second.parts.page is not None
    assert first.parts.page.page.token != second.parts.page.page.token
