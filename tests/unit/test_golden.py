"""The golden-file helper never writes the file it checks against unless asked to."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import golden


def test_a_missing_golden_file_fails_and_is_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(golden.ENV, raising=False)
    monkeypatch.delenv("UPDATE_GOLDEN", raising=False)
    path = tmp_path / "views" / "triage.json"
    with pytest.raises(AssertionError, match="is missing"):
        golden.golden_text(path, "{}\n")
    assert not path.exists()


def test_the_views_and_reports_golden_checks_fail_on_a_missing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.unit import test_reports, test_views

    monkeypatch.delenv(golden.ENV, raising=False)
    monkeypatch.delenv("UPDATE_GOLDEN", raising=False)
    monkeypatch.setattr(test_views, "GOLDEN", tmp_path / "views")
    monkeypatch.setattr(test_reports, "GOLDEN", tmp_path / "reports")
    with pytest.raises(AssertionError, match="is missing"):
        test_views.check_golden("triage", {"a": 1})
    with pytest.raises(AssertionError, match="is missing"):
        test_reports.check_golden("x.md", b"text\n")
    assert not list(tmp_path.rglob("*.*"))


def test_updating_writes_the_file_then_checks_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(golden.ENV, "1")
    path = tmp_path / "g.txt"
    assert golden.golden_text(path, "same\n") == "same\n" and path.read_text() == "same\n"
