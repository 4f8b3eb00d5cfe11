"""``decklog.toml``: what an operator configures beyond the environment (alerts, agents, approvals, actions).

Loaded once at start-up; an unknown key or a bad value stops start-up with the key's path. The shipped
``decklog.example.toml`` is the default and documents every key.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from decklog.bot.settings import SettingsError
from decklog.core.egress import parse_rule
from decklog.core.errors import InvalidInput
from decklog.core.oncall.setup import OncallConfig


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SlackConfig(_Section):
    alerts_channel: str = ""  # DECKLOG_ALERTS_CHANNEL wins when set
    dedicated_channel_prefix: str = "inc-"
    pace_per_channel_s: float = Field(1.0, ge=0)
    header_update_interval_s: float = Field(2.0, ge=0)
    declarer_role: str = Field("commander", max_length=30)  # the Slack declarer's role ("" = none)
    # a dedicated channel is archived this many seconds after the resolve (DECKLOG_ARCHIVE_AFTER wins),
    # with a notice this long before (core/lifecycle.py)
    archive_after: float = Field(7 * 86_400, ge=0)
    archive_notice: float = Field(86_400, ge=0)


class AlertsConfig(_Section):
    grouping_window_minutes: float = Field(10, ge=0)
    rate_limit_per_minute: int = Field(120, ge=1)
    max_payload_bytes: int = Field(32_000_000, ge=1024)  # a 10,000-alert Alertmanager group is ~10 MB
    raw_evidence_bytes: int = Field(16_384, ge=256)
    default_severity: int = Field(3, ge=1, le=4)
    severity: dict[str, dict[str, int]] = Field(default_factory=dict)


class ChangesConfig(_Section):
    link_window_hours: float = Field(6, ge=0)


class RulesConfig(_Section):
    """``[agents.rules]``: the action names the rule-based reasoner proposes (an empty name switches that rule off)."""

    rollback_action: str = "rollback_deploy"  # undoes a deploy, and a change whose kind's action the catalog lacks
    config_action: str = "revert_config"  # undoes a config push (a change of kind "config")
    flag_action: str = "flag_off"  # undoes a feature flag flip (a change of kind "flag")
    status_action: str = "status_page_update"
    status_update_after: float = Field(30, gt=0)  # minutes without a public update (SEV1/SEV2) before proposing one

    def reasoner_args(self) -> dict[str, Any]:
        """The keyword arguments of ``RuleBasedReasoner`` this section sets."""
        return {
            "rollback_action": self.rollback_action,
            "undo_actions": {"config": self.config_action, "flag": self.flag_action},
            "status_action": self.status_action,
            "status_update_after_minutes": self.status_update_after,
        }


class EvidenceConfig(_Section):
    """``[agents.evidence]``: the outside read tools' bounds and the checks' PromQL windows (core/evidence)."""

    window: str = Field("5m", pattern=r"^\d+[smhd]$")  # the span each check looks at (rate windows)
    baseline: str = Field("30m", pattern=r"^\d+[smhd]$")  # a check compares with the same window this much earlier
    lookback_minutes: float = Field(30, gt=0)  # how far back a range query looks for an onset or a new version
    max_reads: int = Field(150, ge=1, le=1000)  # per turn: 8 candidates, 4 followed below them, the rest
    max_seconds: float = Field(10, gt=0)  # per turn, all reads together
    max_bytes: int = Field(512_000, ge=1000)  # per turn
    call_timeout_s: float = Field(3, gt=0)


class AgentsConfig(_Section):
    first_turn_delay: float | None = Field(None, ge=0)  # DECKLOG_FIRST_TURN_DELAY wins when set
    turn_debounce: float | None = Field(None, ge=0)
    model: str = "claude-sonnet-5-5"
    max_steps: int = Field(6, ge=1, le=20)
    max_tokens: int = Field(1024, ge=64)
    turn_timeout_s: float = Field(60, gt=0)
    max_concurrent_turns: int = Field(4, ge=1)  # turns, asks and catch-ups at once (across replicas)
    idle_nudge_minutes: float = Field(20, gt=0)
    view_budget_bytes: int = Field(12_000, ge=1000)
    input_usd_per_mtok: float = 3.0
    output_usd_per_mtok: float = 15.0
    rules: RulesConfig = Field(default_factory=RulesConfig)
    evidence: EvidenceConfig = Field(default_factory=EvidenceConfig)


class ApprovalsConfig(_Section):
    approvers: tuple[str, ...] = ()
    user_groups: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    expiry_minutes: float = Field(30, gt=0)
    r3_approvals: int = Field(1, ge=1, le=5)


class ObligationsConfig(_Section):
    lease_seconds: float = Field(120, gt=0)


class ReportsConfig(_Section):
    templates_dir: str = ""  # report templates that override the shipped ones by name; relative to decklog.toml
    public_url: str = ""  # where people reach this server (https://decklog.example.com); links in filed follow-ups

    @field_validator("public_url")
    @classmethod
    def _absolute(cls, value: str) -> str:
        url = value.strip().rstrip("/")
        if not url:
            return ""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL with a host (e.g. https://decklog.example.com)")
        if parts.query or parts.fragment:
            raise ValueError(f"{value!r}: a base URL takes no query or fragment")
        return url


class WebhookConfig(_Section):
    """One ``[[webhooks]]`` endpoint (adapters/webhooks/sender.py): every entry of ``kinds`` (empty: all kinds),
    signed with ``secret`` as the Standard Webhooks specification says (``whsec_`` and base64 of 24-64 random
    bytes). ``name`` keys its delivery progress; it defaults to the URL's host and path."""

    url: str
    secret: str = Field(repr=False)
    kinds: tuple[str, ...] = ()
    name: str = ""
    timeout_s: float = Field(10.0, gt=0, le=60)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL with a host")
        return value.strip()

    @field_validator("secret")
    @classmethod
    def _whsec(cls, value: str) -> str:
        import base64
        import binascii

        raw = value.strip().removeprefix("whsec_")
        try:
            key = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
        except (binascii.Error, ValueError):
            key = b""
        if not value.strip().startswith("whsec_") or not 24 <= len(key) <= 64:
            raise ValueError("must be whsec_ followed by base64 of 24-64 random bytes (openssl rand -base64 32)")
        return value.strip()

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, kinds: tuple[str, ...]) -> tuple[str, ...]:
        from decklog.core.entries import PAYLOADS

        unknown = [k for k in kinds if k not in PAYLOADS]
        if unknown:
            raise ValueError(f"unknown entry kind {unknown[0]!r}")
        return kinds

    @property
    def key(self) -> str:
        if self.name:
            return self.name
        parts = urlsplit(self.url)
        return f"{parts.netloc}{parts.path}"


class SecurityConfig(_Section):
    # Hosts executors (and read tools) may call (core/egress.py). None (the key absent) = the hosts of the
    # configured executor URLs; [] = nothing.
    egress_allow: tuple[str, ...] | None = None

    @field_validator("egress_allow")
    @classmethod
    def _valid_entries(cls, entries: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for entry in entries or ():
            try:
                parse_rule(entry)
            except InvalidInput as exc:
                raise ValueError(str(exc)) from None
        return entries


class RemindersConfig(_Section):
    """``[reminders]`` (core/reminders.py): minutes without a status update before the commander is nudged,
    per severity (``SEV1`` … ``SEV4``; a severity left out gets no nudge), and the days after a resolve when the
    owners of open follow-ups are reminded (0: never)."""

    status_update: dict[str, float] = Field(default_factory=lambda: {"SEV1": 30.0, "SEV2": 60.0})
    follow_ups_after_days: float = Field(3, ge=0)

    @field_validator("status_update")
    @classmethod
    def _severities(cls, value: dict[str, float]) -> dict[str, float]:
        out: dict[str, float] = {}
        for key, minutes in value.items():
            name = key.strip().upper()
            if name not in ("SEV1", "SEV2", "SEV3", "SEV4"):
                raise ValueError(f"unknown severity {key!r} (use SEV1, SEV2, SEV3 or SEV4)")
            if not minutes > 0:
                raise ValueError(f"{key}: minutes must be greater than 0")
            out[name] = float(minutes)
        return out

    def status_update_seconds(self) -> dict[int, float]:
        return {int(name[3:]): minutes * 60 for name, minutes in self.status_update.items()}


class DecklogConfig(_Section):
    slack: SlackConfig = SlackConfig()
    alerts: AlertsConfig = AlertsConfig()
    changes: ChangesConfig = ChangesConfig()
    agents: AgentsConfig = AgentsConfig()
    approvals: ApprovalsConfig = ApprovalsConfig()
    obligations: ObligationsConfig = ObligationsConfig()
    reports: ReportsConfig = ReportsConfig()
    security: SecurityConfig = SecurityConfig()
    reminders: RemindersConfig = RemindersConfig()
    oncall: OncallConfig = OncallConfig()  # schedules, escalation policies, routes, people (core/oncall/setup.py)
    actions: tuple[dict[str, Any], ...] = ()
    webhooks: tuple[WebhookConfig, ...] = ()
    path: str = ""


def load_config(path: Path) -> DecklogConfig:
    """Read and validate a decklog.toml; ``SettingsError`` names the file and the key at fault."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SettingsError(f"DECKLOG_CONFIG: no such file: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"DECKLOG_CONFIG: {path} is not valid TOML: {exc}") from None
    try:
        return DecklogConfig.model_validate({**data, "path": str(path)})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise SettingsError(f"DECKLOG_CONFIG: {path}: {where}: {msg}") from None
