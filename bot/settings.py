"""Process settings from the environment (pydantic-settings). The exact variable names are an external contract.

A missing or malformed setting stops start-up with a message that names the variable; nothing is checked lazily
per request.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

SlackMode = Literal["sandbox", "http", "socket"]
SLACK_DEFAULT_API_URL = "https://slack.com/api/"
GITHUB_DEFAULT_API_URL = "https://api.github.com"
PAGERDUTY_DEFAULT_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"


class SettingsError(Exception):
    """Bad or missing configuration; the message names the environment variable."""


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/decklog`` (``~/.local/share/decklog``): the one default of the CLI, ``decklog serve`` and
    ``make run`` alike (decisions 9 and 141), absolute so that it is the same from every working directory. A relative
    ``XDG_DATA_HOME`` is ignored, as the XDG Base Directory specification says."""
    base = os.environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(base):
        base = str(Path.home() / ".local" / "share")
    return Path(base) / "decklog"


def project_root() -> Path:
    """The directory that holds the packages (a checkout's top level, or site-packages in a wheel install). Shipped
    files are found through ``importlib.resources`` (``example_config_path``, ``PromptLibrary.shipped``)."""
    return Path(__file__).resolve().parent.parent


def example_config_path() -> Path:
    """The shipped ``decklog.example.toml`` (package data of ``bot``, found in a wheel install as in a checkout):
    the configuration used when ``DECKLOG_CONFIG`` is unset."""
    return Path(str(resources.files("decklog.bot") / "decklog.example.toml"))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    data_dir: Path = Field(default_factory=default_data_dir, validation_alias="DECKLOG_DATA_DIR")
    host: str = Field("127.0.0.1", validation_alias="DECKLOG_HOST", min_length=1)
    # The sandbox (no Slack credentials) serves on a non-loopback DECKLOG_HOST only with this explicit opt-in.
    sandbox_public: bool = Field(False, validation_alias="DECKLOG_SANDBOX_PUBLIC")
    port: int = Field(8080, ge=0, le=65535, validation_alias="DECKLOG_PORT")
    config_path: Path | None = Field(None, validation_alias="DECKLOG_CONFIG")
    slack_bot_token: SecretStr | None = Field(None, validation_alias="SLACK_BOT_TOKEN")
    slack_signing_secret: SecretStr | None = Field(None, validation_alias="SLACK_SIGNING_SECRET")
    slack_app_token: SecretStr | None = Field(None, validation_alias="SLACK_APP_TOKEN")
    slack_api_url: str | None = Field(None, validation_alias="DECKLOG_SLACK_API_URL")
    alerts_channel: str | None = Field(None, validation_alias="DECKLOG_ALERTS_CHANNEL")
    alert_token: SecretStr | None = Field(None, validation_alias="DECKLOG_ALERT_TOKEN")
    approvers: str = Field("", validation_alias="DECKLOG_APPROVERS")
    deploy_api_url: str | None = Field(None, validation_alias="DECKLOG_DEPLOY_API_URL")
    statuspage_api_url: str | None = Field(None, validation_alias="DECKLOG_STATUSPAGE_API_URL")
    executor_timeout: float | None = Field(None, gt=0, validation_alias="DECKLOG_EXECUTOR_TIMEOUT")
    api_token: SecretStr | None = Field(None, validation_alias="DECKLOG_API_TOKEN")
    log_key: SecretStr | None = Field(None, validation_alias="DECKLOG_LOG_KEY")  # HMAC key of new scopes' chains
    anthropic_api_key: SecretStr | None = Field(None, validation_alias="ANTHROPIC_API_KEY")
    anthropic_base_url: str | None = Field(None, validation_alias="ANTHROPIC_BASE_URL")
    first_turn_delay: float = Field(15.0, ge=0, validation_alias="DECKLOG_FIRST_TURN_DELAY")
    turn_debounce: float = Field(13.0, ge=0, validation_alias="DECKLOG_TURN_DEBOUNCE")
    turn_max_wait: float = Field(60.0, gt=0, validation_alias="DECKLOG_TURN_MAX_WAIT")  # caps the debounce
    # postgresql://… or postgresql+psycopg://…: every scope and the index in that database; unset = SQLite files
    database_url: str | None = Field(None, validation_alias="DECKLOG_DATABASE_URL")
    # follow-ups in the team's tracker (GitHub Issues or Jira) and paging (PagerDuty Events API v2)
    github_token: SecretStr | None = Field(None, validation_alias="DECKLOG_GITHUB_TOKEN")
    github_repo: str | None = Field(None, validation_alias="DECKLOG_GITHUB_REPO", pattern=r"^[\w.-]+/[\w.-]+$")
    github_api_url: str = Field(GITHUB_DEFAULT_API_URL, validation_alias="DECKLOG_GITHUB_API_URL")
    jira_url: str | None = Field(None, validation_alias="DECKLOG_JIRA_URL")
    jira_email: str | None = Field(None, validation_alias="DECKLOG_JIRA_EMAIL")
    jira_token: SecretStr | None = Field(None, validation_alias="DECKLOG_JIRA_TOKEN")
    jira_project: str | None = Field(None, validation_alias="DECKLOG_JIRA_PROJECT")
    jira_issue_type: str = Field("Task", min_length=1, validation_alias="DECKLOG_JIRA_ISSUE_TYPE")
    pagerduty_routing_key: SecretStr | None = Field(None, validation_alias="DECKLOG_PAGERDUTY_ROUTING_KEY")
    pagerduty_events_url: str = Field(PAGERDUTY_DEFAULT_EVENTS_URL, validation_alias="DECKLOG_PAGERDUTY_EVENTS_URL")
    # the agents' outside read tools (core/evidence): Prometheus and Alertmanager HTTP APIs, a Backstage catalog
    prometheus_url: str | None = Field(None, validation_alias="DECKLOG_PROMETHEUS_URL")
    prometheus_token: SecretStr | None = Field(None, validation_alias="DECKLOG_PROMETHEUS_TOKEN")  # bearer
    prometheus_user: str | None = Field(None, validation_alias="DECKLOG_PROMETHEUS_USER")  # basic auth
    prometheus_password: SecretStr | None = Field(None, validation_alias="DECKLOG_PROMETHEUS_PASSWORD")
    alertmanager_url: str | None = Field(None, validation_alias="DECKLOG_ALERTMANAGER_URL")
    alertmanager_token: SecretStr | None = Field(None, validation_alias="DECKLOG_ALERTMANAGER_TOKEN")
    catalog: Path | None = Field(None, validation_alias="DECKLOG_CATALOG")  # a catalog-info.yaml or a directory
    # on-call pages by SMS / voice (Twilio's REST API; the API URL for a loopback fake) and by email (SMTP)
    twilio_account_sid: str | None = Field(None, validation_alias="DECKLOG_TWILIO_ACCOUNT_SID")
    twilio_auth_token: SecretStr | None = Field(None, validation_alias="DECKLOG_TWILIO_AUTH_TOKEN")
    twilio_from: str | None = Field(None, validation_alias="DECKLOG_TWILIO_FROM")
    twilio_api_url: str | None = Field(None, validation_alias="DECKLOG_TWILIO_API_URL")
    smtp_url: SecretStr | None = Field(None, validation_alias="DECKLOG_SMTP_URL")  # may hold a password
    smtp_from: str | None = Field(None, validation_alias="DECKLOG_SMTP_FROM")
    # seconds after the resolve before a dedicated channel is archived (unset: [slack] archive_after)
    archive_after: float | None = Field(None, ge=0, allow_inf_nan=False, validation_alias="DECKLOG_ARCHIVE_AFTER")

    @field_validator(
        "slack_bot_token",
        "slack_signing_secret",
        "slack_app_token",
        "alert_token",
        "api_token",
        "log_key",
        "anthropic_api_key",
        "github_token",
        "jira_token",
        "pagerduty_routing_key",
        "prometheus_token",
        "prometheus_password",
        "alertmanager_token",
        "twilio_auth_token",
        "smtp_url",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator(
        "slack_api_url",
        "deploy_api_url",
        "statuspage_api_url",
        "anthropic_base_url",
        "alerts_channel",
        "github_repo",
        "jira_url",
        "jira_email",
        "jira_project",
        "archive_after",
        "prometheus_url",
        "prometheus_user",
        "alertmanager_url",
        "catalog",
        mode="before",
    )
    @classmethod
    def _empty_url_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("github_api_url", "pagerduty_events_url", mode="before")
    @classmethod
    def _empty_is_default(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, str) and not value.strip():
            return GITHUB_DEFAULT_API_URL if info.field_name == "github_api_url" else PAGERDUTY_DEFAULT_EVENTS_URL
        return value

    @field_validator(
        "slack_api_url",
        "deploy_api_url",
        "statuspage_api_url",
        "anthropic_base_url",
        "github_api_url",
        "jira_url",
        "pagerduty_events_url",
        "prometheus_url",
        "alertmanager_url",
    )
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("database_url", mode="before")
    @classmethod
    def _postgres_url(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        if isinstance(value, str) and not value.startswith(("postgresql://", "postgresql+psycopg://")):
            raise ValueError(
                "must be a postgresql:// or postgresql+psycopg:// URL (unset: SQLite under DECKLOG_DATA_DIR)"
            )
        return value

    @property
    def approver_ids(self) -> tuple[str, ...]:
        return tuple(x.strip() for x in self.approvers.split(",") if x.strip())

    @property
    def slack_base_url(self) -> str:
        url = self.slack_api_url or SLACK_DEFAULT_API_URL
        return url if url.endswith("/") else url + "/"

    def slack_mode(self, *, socket_mode: bool = False) -> SlackMode:
        """Which Slack the process talks to, by the credential rules of DESIGN §9 (else ``SettingsError``)."""
        bot, secret, app = self.slack_bot_token, self.slack_signing_secret, self.slack_app_token
        if not (bot or secret or app):
            return "sandbox"
        if socket_mode:
            missing = [n for n, v in (("SLACK_BOT_TOKEN", bot), ("SLACK_APP_TOKEN", app)) if not v]
            if missing:
                raise SettingsError(
                    f"Socket Mode needs {' and '.join(missing)} (set, or unset every SLACK_* variable for the local sandbox)"
                )
            return "socket"
        missing = [n for n, v in (("SLACK_BOT_TOKEN", bot), ("SLACK_SIGNING_SECRET", secret)) if not v]
        if missing:
            hint = " (or use `decklog serve --socket-mode` with SLACK_APP_TOKEN)" if app and bot else ""
            raise SettingsError(
                f"HTTP mode needs {' and '.join(missing)}{hint}; unset every SLACK_* variable for the local sandbox"
            )
        return "http"

    @property
    def resolved_config_path(self) -> Path:
        return self.config_path or example_config_path()


def load_settings(**overrides: object) -> Settings:
    """Read the environment; raise ``SettingsError`` naming the first bad variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else "settings"
        value = first.get("input")
        shown = (
            f" (got {value!r})"
            if isinstance(value, str | int | float)
            and "TOKEN" not in name
            and "SECRET" not in name
            and "KEY" not in name
            else ""
        )
        raise SettingsError(f"{name}: {first['msg']}{shown}") from None
