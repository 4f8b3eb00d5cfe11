"""A reply by SMS acknowledges a page: Twilio's incoming-message webhook (``POST /twilio/sms``, form fields ``From``,
``Body``, …), signed with ``X-Twilio-Signature`` (checked with the official client's ``RequestValidator`` against
``DECKLOG_TWILIO_AUTH_TOKEN``; a bad or missing signature is 403). ``ACK`` (any case; ``ACKNOWLEDGE``, ``OK`` too)
from a phone number in ``[oncall.people]`` acknowledges the incident whose latest unacknowledged page went to that
person, as an ``acknowledged`` entry (``via: sms``); the answer is TwiML saying what happened."""

from __future__ import annotations

from xml.sax.saxutils import escape

from aiohttp import web
from twilio.request_validator import RequestValidator

from decklog.core.oncall import desk
from decklog.core.oncall.setup import OncallConfig
from decklog.core.store.ports import IndexPort, LogStore

PATH = "/twilio/sms"
ACK_WORDS = frozenset({"ack", "acknowledge", "ok"})
#: Twilio's incoming-message form is a few KB; nothing larger is read before the signature can be checked.
MAX_BODY = 64 * 1024


def _twiml(text: str) -> web.Response:
    body = f'<?xml version="1.0" encoding="UTF-8"?><Response><Message>{escape(text)}</Message></Response>'
    return web.Response(text=body, content_type="application/xml")


class SmsReplies:
    def __init__(self, store: LogStore, index: IndexPort, setup: OncallConfig, auth_token: str) -> None:
        self.store = store
        self.index = index
        self.setup = setup
        self.validator = RequestValidator(auth_token)

    async def receive(self, request: web.Request) -> web.StreamResponse:
        signature = request.headers.get("X-Twilio-Signature", "")
        if not signature:  # refused before the body is read
            return web.json_response({"error": "the X-Twilio-Signature is missing or not valid"}, status=403)
        if request.content_length is None or request.content_length > MAX_BODY:
            return web.json_response(
                {"error": f"the body must declare its length, at most {MAX_BODY} bytes"}, status=413
            )
        form = {k: str(v) for k, v in (await request.post()).items()}
        if not self.validator.validate(str(request.url), form, signature):
            return web.json_response({"error": "the X-Twilio-Signature is missing or not valid"}, status=403)
        phone, words = form.get("From", ""), form.get("Body", "").strip().lower().split()
        user = next((uid for uid, p in self.setup.people.items() if p.phone and p.phone == phone), None)
        if user is None:
            return _twiml("decklog does not know this number ([oncall.people] phone).")
        if not words or words[0].strip(".!") not in ACK_WORDS:
            return _twiml("Reply ACK to acknowledge your page.")
        scopes = [r.id for r in await self.index.list_scopes(kind="incident", open_only=True, limit=None)]
        scope = await desk.awaiting_ack(self.store, scopes, user)
        if scope is None:
            return _twiml("No page is waiting for your acknowledgement.")
        await desk.acknowledge(self.store, scope, user, via="sms")
        return _twiml(f"Acknowledged {scope}: the escalation stops.")
