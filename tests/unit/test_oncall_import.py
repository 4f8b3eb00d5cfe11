"""``decklog oncall import``: each vendor's own documented example (tests/fixtures/oncall/, the source in each
file's ``_source``) becomes an ``[oncall]`` decklog.toml that decklog starts with, and what could not be mapped is
named."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from decklog.bot.cli import main
from decklog.bot.config import load_config

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "oncall"


def run(capsys: pytest.CaptureFixture[str], vendor: str, tmp_path: Path) -> tuple[dict, list[str]]:
    assert main(["oncall", "import", "--from", vendor, str(FIXTURES / f"{vendor}.json")]) == 0
    out = capsys.readouterr().out
    path = tmp_path / "decklog.toml"
    path.write_text(out, encoding="utf-8")
    config = load_config(path)  # what was printed starts decklog
    assert config.oncall.enabled
    notes = [line.removeprefix("#   - ") for line in out.splitlines() if line.startswith("#   - ")]
    return tomllib.loads(out)["oncall"], notes


@pytest.mark.parametrize("vendor", ["pagerduty", "opsgenie", "grafana-oncall"])
def test_every_fixture_names_its_source(vendor: str) -> None:
    assert json.loads((FIXTURES / f"{vendor}.json").read_text())["_source"]


def test_pagerduty_schedule_layers_and_escalation_rules(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    oncall, notes = run(capsys, "pagerduty", tmp_path)
    [schedule] = oncall["schedules"]
    assert schedule["name"] == "daily-engineering-rotation" and schedule["timezone"] == "America/New_York"
    assert schedule["layers"] == [{"users": ["PXPGF42"], "rotation": "1d", "start": "2015-11-06T20:00:00-05:00"}]
    [policy] = oncall["policies"]
    assert policy["repeat"] == 2
    assert policy["levels"] == [{"targets": ["user:PAM4FGS", "schedule:daily-engineering-rotation"], "after": "30m"}]
    assert any("restriction daily_restriction" in n for n in notes)
    assert any("service 'My Mail Service'" in n for n in notes)
    assert any("PXPGF42 (Regina Phalange)" in n for n in notes)


def test_opsgenie_rotation(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    oncall, notes = run(capsys, "opsgenie", tmp_path)
    [schedule] = oncall["schedules"]
    assert schedule["timezone"] == "Europe/Kirov"
    assert schedule["layers"] == [{"users": ["user@opsgenie.com"], "rotation": "6h", "start": "2017-02-06T05:00:00Z"}]
    assert any("participant team" in n for n in notes) and any("'none' turn" in n for n in notes)
    assert any("ends 2017-02-23T06:00:00Z" in n for n in notes)


def test_grafana_oncall_calendar_shifts_and_chain(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    oncall, notes = run(capsys, "grafana-oncall", tmp_path)
    [schedule] = oncall["schedules"]
    assert schedule["name"] == "demo-schedule-calendar"
    assert schedule["layers"][0]["rotation"] == "2w"
    [policy] = oncall["policies"]
    assert policy["levels"] == [{"targets": ["user:U4DNY931HHJS5"], "after": "0s"}]
    assert any("iCal schedule" in n for n in notes) and any("single_event" in n for n in notes)
    assert any("60 s wait before the first notification" in n for n in notes)


def test_bad_files_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["oncall", "import", "--from", "pagerduty", str(bad)]) == 2
    assert "is not JSON" in capsys.readouterr().err
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    assert main(["oncall", "import", "--from", "pagerduty", str(empty)]) == 2
    assert "no schedule" in capsys.readouterr().err
    assert main(["oncall", "import", "--from", "splunk", str(empty)]) == 2
