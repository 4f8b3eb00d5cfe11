"""The contact methods of on-call pages against real wire formats: SMS and voice through the official ``twilio``
client pointed at a loopback fake of Twilio's REST API; email through a real SMTP server on loopback (aiosmtpd);
the egress allowlist checked before either; a person's rule naming a method nobody configured stops start-up."""

from __future__ import annotations

import asyncio
import socket
from email import message_from_bytes
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from decklog.adapters.email.smtp import SmtpNotifier
from decklog.adapters.twilio.sms import TwilioNotifier
from decklog.bot.config import DecklogConfig
from decklog.bot.oncall import notifiers
from decklog.bot.settings import Settings, SettingsError
from decklog.core.egress import EgressPolicy
from decklog.core.oncall.sender import Notice
from decklog.core.outbox.sender import PermanentFailure, RetryAfter
from tests.fakes.twilio import ACCOUNT_SID, AUTH_TOKEN, FROM, FakeTwilio

NOTICE = Notice(
    scope="incident/db-down",
    seq=7,
    key="page:incident/db-down:3:0:U0ALICE:0:sms",
    method="sms",
    target="U0ALICE",
    address="+14155550100",
    title="db is down",
    severity=1,
    permalink="https://example.slack.com/archives/C1/p1",
    escalation=3,
    level=0,
    repetition=0,
)


def twilio(base: str, method: str = "sms", egress: EgressPolicy | None = None) -> TwilioNotifier:
    return TwilioNotifier(
        method=method, account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN, from_number=FROM, api_url=base, egress=egress
    )


async def test_sms_and_voice_go_through_the_twilio_client_to_its_rest_api() -> None:
    async with FakeTwilio() as fake:
        sms_notifier, voice_notifier = twilio(fake.base_url), twilio(fake.base_url, "voice")
        await sms_notifier.notify(NOTICE)
        await voice_notifier.notify(NOTICE)
        await sms_notifier.close()
        await voice_notifier.close()
        [sms] = fake.messages
        assert sms["To"] == "+14155550100" and sms["From"] == FROM
        assert "db is down" in sms["Body"] and "Reply ACK" in sms["Body"]
        [call] = fake.voice_calls
        assert call["To"] == "+14155550100" and call["Twiml"].startswith("<Response><Say>")


async def test_twilio_rate_limit_retries_a_bad_credential_parks_and_egress_refuses() -> None:
    async with FakeTwilio() as fake:
        fake.rate_limit()
        with pytest.raises(RetryAfter):
            await twilio(fake.base_url).notify(NOTICE)
        bad = TwilioNotifier(
            method="sms", account_sid=ACCOUNT_SID, auth_token="wrong", from_number=FROM, api_url=fake.base_url
        )
        with pytest.raises(PermanentFailure, match="Twilio refused"):
            await bad.notify(NOTICE)
        with pytest.raises(PermanentFailure, match="egress"):
            await twilio(fake.base_url, egress=EgressPolicy.from_entries(["api.twilio.com"])).notify(NOTICE)
        assert fake.messages == []


class Inbox:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append((envelope.rcpt_tos, message_from_bytes(envelope.content)))
        return "250 Message accepted for delivery"


async def test_email_pages_reach_a_real_smtp_server() -> None:
    inbox = Inbox()
    with socket.socket() as probe:  # aiosmtpd's start-up check connects to the port it was given: pick a free one
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    await asyncio.to_thread(controller.start)
    try:
        notice = Notice(**{**NOTICE.__dict__, "method": "email", "address": "alice@example.com"})
        await SmtpNotifier(f"smtp://127.0.0.1:{port}", "decklog@example.com").notify(notice)
        [(rcpt, msg)] = inbox.messages
        assert rcpt == ["alice@example.com"] and msg["From"] == "decklog@example.com"
        assert "db is down" in msg["Subject"] and msg["X-Decklog-Page"] == notice.key
        assert msg["Message-ID"].endswith("@decklog>")
        refusing = SmtpNotifier(
            f"smtp://127.0.0.1:{port}", "d@example.com", egress=EgressPolicy.from_entries(["mail.example.com"])
        )
        with pytest.raises(PermanentFailure, match="egress"):
            await refusing.notify(notice)
        assert len(inbox.messages) == 1
    finally:
        await asyncio.to_thread(controller.stop)


async def test_a_rule_naming_an_unconfigured_method_stops_start_up() -> None:
    config = DecklogConfig.model_validate(
        {"oncall": {"people": {"U0ALICE": {"phone": "+14155550100", "rules": [{"method": "sms"}]}}}}
    )
    with pytest.raises(SettingsError, match=r"oncall\.people\.U0ALICE\.rules: sms needs DECKLOG_TWILIO"):
        notifiers(Settings(), config, None, None)  # type: ignore[arg-type]
    made = notifiers(
        Settings.model_validate(
            {
                "DECKLOG_TWILIO_ACCOUNT_SID": ACCOUNT_SID,
                "DECKLOG_TWILIO_AUTH_TOKEN": AUTH_TOKEN,
                "DECKLOG_TWILIO_FROM": FROM,
                "DECKLOG_TWILIO_API_URL": "http://127.0.0.1:9",
            }
        ),
        config,
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
    )
    assert {"slack", "sms", "voice", "pagerduty"} <= set(made)
    for method in ("sms", "voice"):
        sender = made[method]
        assert isinstance(sender, TwilioNotifier)
        await sender.close()
