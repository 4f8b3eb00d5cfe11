"""Configuration of the channel lifecycle and the reminders: ``[slack] archive_after``/``archive_notice``,
``DECKLOG_ARCHIVE_AFTER`` (seconds, wins over the file) and ``[reminders]``; bad values stop start-up with the
key's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from decklog.bot.config import load_config
from decklog.bot.settings import SettingsError, example_config_path, load_settings
from decklog.core.reminders import DAY_S, LifecyclePolicy


def test_defaults_are_seven_days_and_sev1_30_sev2_60_minutes() -> None:
    config = load_config(example_config_path())
    assert config.slack.archive_after == 7 * DAY_S and config.slack.archive_notice == DAY_S
    assert config.reminders.status_update_seconds() == {1: 1800.0, 2: 3600.0}
    assert config.reminders.follow_ups_after_days == 3
    policy = LifecyclePolicy()
    assert policy.archive_after_s == 7 * DAY_S and dict(policy.status_update_s) == {1: 1800.0, 2: 3600.0}


def test_decklog_archive_after_is_seconds_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DECKLOG_ARCHIVE_AFTER", "3600")
    assert load_settings().archive_after == 3600
    monkeypatch.setenv("DECKLOG_ARCHIVE_AFTER", "")
    assert load_settings().archive_after is None  # empty = unset: the file's value
    for bad in ("-1", "soon", "nan"):
        monkeypatch.setenv("DECKLOG_ARCHIVE_AFTER", bad)
        with pytest.raises(SettingsError, match="DECKLOG_ARCHIVE_AFTER"):
            load_settings()


def test_the_lead_of_the_notice_never_exceeds_the_wait() -> None:
    assert LifecyclePolicy(archive_after_s=600, archive_notice_s=DAY_S).notice_lead_s == 600
    assert LifecyclePolicy().notice_lead_s == DAY_S


@pytest.mark.parametrize(
    ("toml", "where"),
    [
        ("[reminders]\nstatus_update = { SEV9 = 30 }\n", "reminders.status_update"),
        ("[reminders]\nstatus_update = { SEV1 = 0 }\n", "reminders.status_update"),
        ("[reminders]\nfollow_ups_after_days = -1\n", "reminders.follow_ups_after_days"),
        ("[reminders]\nnudge = true\n", "reminders.nudge"),
        ("[slack]\narchive_after = -5\n", "slack.archive_after"),
    ],
)
def test_bad_values_name_their_key(tmp_path: Path, toml: str, where: str) -> None:
    path = tmp_path / "decklog.toml"
    path.write_text(toml, encoding="utf-8")
    with pytest.raises(SettingsError, match=where):
        load_config(path)


def test_severity_names_are_case_insensitive(tmp_path: Path) -> None:
    path = tmp_path / "decklog.toml"
    path.write_text("[reminders]\nstatus_update = { sev3 = 120 }\n", encoding="utf-8")
    assert load_config(path).reminders.status_update_seconds() == {3: 7200.0}
