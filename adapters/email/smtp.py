"""On-call pages by email through SMTP (``DECKLOG_SMTP_URL`` = ``smtp://[user:password@]host:port`` or
``smtps://…``; ``DECKLOG_SMTP_FROM`` the sender address), sent with the standard library's ``smtplib`` on a worker
thread. The page's key is the Message-ID (``<key@decklog>``), so a redelivery after a crash is one thread in the
reader's mailbox. The host is checked against the egress allowlist first. A 5xx reply (a bad recipient) parks the
page; a 4xx or a lost connection is retried with backoff.
"""

from __future__ import annotations

import asyncio
import hashlib
import smtplib
from email.message import EmailMessage
from urllib.parse import unquote, urlsplit

from decklog.core.egress import EgressPolicy, check
from decklog.core.oncall.sender import Notice
from decklog.core.outbox.sender import PermanentFailure


class SmtpNotifier:
    """``Notifier`` for method ``email``."""

    def __init__(self, url: str, sender: str, *, egress: EgressPolicy | None = None, timeout: float = 10.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
            raise ValueError(f"DECKLOG_SMTP_URL: {url!r} is not smtp://host:port or smtps://host:port")
        self.url = url
        self.tls = parts.scheme == "smtps"
        self.host = parts.hostname
        self.port = parts.port or (465 if self.tls else 25)
        self.user = unquote(parts.username or "")
        self.password = unquote(parts.password or "")
        self.sender = sender
        self.egress = egress
        self.timeout = timeout

    def message(self, notice: Notice) -> EmailMessage:
        msg = EmailMessage()
        msg["From"] = self.sender
        msg["To"] = notice.address
        msg["Subject"] = notice.text[:200]
        msg["Message-ID"] = f"<{hashlib.sha256(notice.key.encode()).hexdigest()[:32]}@decklog>"
        msg["X-Decklog-Page"] = notice.key
        body = notice.text + "\n\nAcknowledge in Slack (the DM's Acknowledge button, or /incident ack in the thread)."
        msg.set_content(body)
        return msg

    async def notify(self, notice: Notice) -> None:
        if not notice.address:
            raise PermanentFailure(f"{notice.target} has no email address")
        if self.egress is not None:
            refused = check(self.egress, f"{'https' if self.tls else 'http'}://{self.host}:{self.port}/")
            if refused is not None:
                raise PermanentFailure(f"egress refused: {refused.host} is not in [security] egress_allow")
        await asyncio.to_thread(self._send, self.message(notice))

    def _send(self, msg: EmailMessage) -> None:
        smtp_class = smtplib.SMTP_SSL if self.tls else smtplib.SMTP
        try:
            with smtp_class(self.host, self.port, timeout=self.timeout) as smtp:
                if self.user:
                    smtp.login(self.user, self.password)
                smtp.send_message(msg)
        except smtplib.SMTPResponseException as exc:
            if 500 <= exc.smtp_code < 600:
                raise PermanentFailure(f"the SMTP server refused the page: {exc.smtp_code} {exc.smtp_error!r}") from exc
            raise
        except smtplib.SMTPRecipientsRefused as exc:
            raise PermanentFailure(f"the SMTP server refused the recipient: {exc.recipients}") from exc
