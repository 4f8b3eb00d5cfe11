"""The link a filed follow-up gives to its incident's report: ``[reports] public_url`` when set, else the address the
server listens on, never a wildcard address nobody can open (``http://0.0.0.0:8080/…`` in every issue filed from the
Docker image, before this)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from decklog.adapters.http.hosts import is_wildcard_host
from decklog.bot.config import load_config
from decklog.bot.parts import Address, http_url
from decklog.bot.settings import Settings, SettingsError
from decklog.bot.trackers import report_link

SCOPE = "incident/payments-5xx"
PATH = f"/api/scopes/{SCOPE}/report.html"


def settings(host: str, tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, host=host, port=8080)


def test_the_public_url_wins_over_any_listen_address(tmp_path: Path) -> None:
    for host in ("0.0.0.0", "127.0.0.1", "decklog.internal"):
        link = report_link("https://decklog.example.com", settings(host, tmp_path), Address("http://x:1"))
        assert link(SCOPE) == "https://decklog.example.com" + PATH


def test_without_it_a_named_address_is_linked_as_the_server_listens_on_it(tmp_path: Path) -> None:
    address = Address()
    link = report_link("", settings("10.0.0.7", tmp_path), address)
    address.url = http_url("10.0.0.7", 8080)  # set once the server listens, after the sender was built
    assert link(SCOPE) == "http://10.0.0.7:8080" + PATH


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "[::]", " "])
def test_a_wildcard_address_gives_the_path_only_and_says_which_key_to_set(
    host: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="decklog.bot.trackers"):
        link = report_link("", settings(host, tmp_path), Address(http_url(host, 8080)))
    assert link(SCOPE) == PATH
    assert "[reports] public_url" in caplog.text


def test_wildcards_and_ipv6_literals() -> None:
    assert [is_wildcard_host(h) for h in ("0.0.0.0", "::", "[::]", "", "127.0.0.1", "::1", "decklog.internal")] == [
        True,
        True,
        True,
        True,
        False,
        False,
        False,
    ]
    assert http_url("::1", 8080) == "http://[::1]:8080"
    assert http_url("[::1]", 8080) == "http://[::1]:8080"
    assert http_url("127.0.0.1", 0) == "http://127.0.0.1:0"


def test_the_key_is_read_from_decklog_toml_without_its_trailing_slash(tmp_path: Path) -> None:
    path = tmp_path / "decklog.toml"
    path.write_text('[reports]\npublic_url = "https://decklog.example.com/ops/"\n', encoding="utf-8")
    assert load_config(path).reports.public_url == "https://decklog.example.com/ops"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("decklog.example.com", "not an http"),
        ("ftp://decklog.example.com", "not an http"),
        ("https://", "not an http"),
        ("https://decklog.example.com/?a=1", "no query or fragment"),
    ],
)
def test_a_bad_public_url_stops_start_up_naming_the_key(value: str, reason: str, tmp_path: Path) -> None:
    path = tmp_path / "decklog.toml"
    path.write_text(f'[reports]\npublic_url = "{value}"\n', encoding="utf-8")
    with pytest.raises(SettingsError, match=rf"reports.public_url: .*{reason}"):
        load_config(path)
