"""On-call pages by SMS and by voice call through Twilio's REST API, with the official ``twilio`` client.

``DECKLOG_TWILIO_ACCOUNT_SID``, ``DECKLOG_TWILIO_AUTH_TOKEN``, ``DECKLOG_TWILIO_FROM`` configure it;
``DECKLOG_TWILIO_API_URL`` replaces ``https://api.twilio.com`` (the tests point it at a loopback fake speaking the
same wire format). Every call is checked against the egress allowlist first; a refusal parks the page (nothing was
sent). Twilio answers 429 when an account sends too fast: ``RetryAfter``; another 4xx (a bad number) cannot be
fixed by retrying: ``PermanentFailure``.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

from twilio.base.exceptions import TwilioRestException
from twilio.http.async_http_client import AsyncTwilioHttpClient
from twilio.rest import Client

from decklog.core.egress import EgressPolicy, check
from decklog.core.oncall.sender import Notice
from decklog.core.outbox.sender import PermanentFailure, RetryAfter

DEFAULT_API_URL = "https://api.twilio.com"


class TwilioNotifier:
    """``Notifier`` for method ``sms`` or ``voice`` (one instance each, sharing nothing but settings)."""

    def __init__(
        self,
        *,
        method: str,
        account_sid: str,
        auth_token: str,
        from_number: str,
        api_url: str = "",
        egress: EgressPolicy | None = None,
    ) -> None:
        if method not in ("sms", "voice"):
            raise ValueError(f"unknown Twilio method {method!r}")
        self.method = method
        self.from_number = from_number
        self.api_url = (api_url or DEFAULT_API_URL).rstrip("/")
        self.egress = egress
        self.client = Client(account_sid, auth_token, http_client=AsyncTwilioHttpClient(timeout=10))
        self.client.api.base_url = self.api_url

    async def close(self) -> None:
        """Close the client's HTTP session (the server's stop; tests)."""
        await self.client.http_client.close()

    async def notify(self, notice: Notice) -> None:
        if not notice.address:
            raise PermanentFailure(f"{notice.target} has no phone number for {self.method}")
        if self.egress is not None:
            refused = check(self.egress, self.api_url)
            if refused is not None:
                raise PermanentFailure(f"egress refused: {refused.host} is not in [security] egress_allow")
        text = notice.text + " Reply ACK to acknowledge."
        try:
            if self.method == "sms":
                await self.client.messages.create_async(to=notice.address, from_=self.from_number, body=text[:1500])
            else:
                twiml = f"<Response><Say>{escape(notice.text)}</Say></Response>"
                await self.client.calls.create_async(to=notice.address, from_=self.from_number, twiml=twiml)
        except TwilioRestException as exc:
            if exc.status == 429:
                raise RetryAfter(5.0, "Twilio rate limit") from exc
            if 400 <= exc.status < 500:
                raise PermanentFailure(f"Twilio refused the {self.method}: {exc.msg}") from exc
            raise
