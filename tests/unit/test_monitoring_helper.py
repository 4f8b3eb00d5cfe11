"""tests/helpers/monitoring.py's rule for a missing binary: skip with how to install it, except under CI=true,
where the test fails (DESIGN §10: real monitoring never skips in CI)."""

from __future__ import annotations

import pytest

from tests.helpers import monitoring


def test_a_missing_binary_skips_outside_ci_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitoring, "find_binary", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="make monitoring"):
        monitoring.require_binary(monitoring.ALERTMANAGER)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="required under CI=true"):
        monitoring.require_binary(monitoring.PROMETHEUS)


def test_the_webhook_config_points_at_decklog_with_the_token_and_max_alerts() -> None:
    config = monitoring.webhook("http://127.0.0.1:8080/", "tok", max_alerts=500, group_by=("alertname", "job"))
    [receiver] = config["receivers"]
    [hook] = receiver["webhook_configs"]
    assert hook["url"] == "http://127.0.0.1:8080/alerts/alertmanager" and hook["max_alerts"] == 500
    assert hook["http_config"]["authorization"] == {"type": "Bearer", "credentials": "tok"}
    assert config["route"]["receiver"] == receiver["name"] and config["route"]["group_by"] == ["alertname", "job"]
