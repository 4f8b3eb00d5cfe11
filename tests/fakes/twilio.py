"""A loopback fake of Twilio's REST API (2010-04-01) for SMS and voice: ``POST
/2010-04-01/Accounts/{AccountSid}/Messages.json`` and ``.../Calls.json``, form-encoded, HTTP Basic auth with the
account SID and auth token — the wire format of https://www.twilio.com/docs/messaging/api/message-resource and
https://www.twilio.com/docs/voice/api/call-resource. 201 with the resource JSON (``sid``, ``status: queued``, …);
a wrong credential 401 and a missing ``To``/``From`` 400 with Twilio's error body (``code``, ``message``,
``more_info``, ``status``); ``rate_limit()`` queues a 429 (Twilio's error 20429).
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

from aiohttp import web

from tests.fakes.loopback import LoopbackFake, error

ACCOUNT_SID = "AC" + "0" * 31 + "1"
AUTH_TOKEN = "twilio-test-token"
FROM = "+15005550006"


class FakeTwilio(LoopbackFake):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[dict[str, str]] = []
        self.voice_calls: list[dict[str, str]] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/2010-04-01/Accounts/{sid}/Messages.json", self._message)
        app.router.add_post("/2010-04-01/Accounts/{sid}/Calls.json", self._call)

    def rate_limit(self) -> None:
        self.queued.append((429, {}, _error(20429, "Too Many Requests", 429)))

    def _authorized(self, request: web.Request) -> bool:
        expected = base64.b64encode(f"{ACCOUNT_SID}:{AUTH_TOKEN}".encode()).decode()
        return request.headers.get("Authorization") == f"Basic {expected}" and request.match_info["sid"] == ACCOUNT_SID

    async def _message(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return error(401, _error(20003, "Authenticate", 401))
        form = {k: str(v) for k, v in (await request.post()).items()}
        if not form.get("To") or not form.get("From") or not form.get("Body"):
            return error(400, _error(21604, "A 'To' phone number, a 'From' and a 'Body' are required.", 400))
        self.messages.append(form)
        sid = "SM" + secrets.token_hex(16)
        return web.json_response(_resource(sid, form, "outbound-api", body=form["Body"]), status=201)

    async def _call(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return error(401, _error(20003, "Authenticate", 401))
        form = {k: str(v) for k, v in (await request.post()).items()}
        if not form.get("To") or not form.get("From") or not (form.get("Twiml") or form.get("Url")):
            return error(400, _error(21205, "Url or Twiml parameter is required.", 400))
        self.voice_calls.append(form)
        sid = "CA" + secrets.token_hex(16)
        return web.json_response(_resource(sid, form, "outbound-api"), status=201)


def _resource(sid: str, form: dict[str, str], direction: str, *, body: str | None = None) -> dict[str, Any]:
    kind = "Messages" if sid.startswith("SM") else "Calls"
    out: dict[str, Any] = {
        "sid": sid,
        "account_sid": ACCOUNT_SID,
        "to": form["To"],
        "from": form["From"],
        "status": "queued",
        "direction": direction,
        "api_version": "2010-04-01",
        "date_created": "Mon, 07 Dec 2026 10:00:00 +0000",
        "uri": f"/2010-04-01/Accounts/{ACCOUNT_SID}/{kind}/{sid}.json",
    }
    if body is not None:
        out.update(body=body, num_segments="1", num_media="0", error_code=None, error_message=None)
    return out


def _error(code: int, message: str, status: int) -> dict[str, Any]:
    return {
        "code": code,
        "message": message,
        "more_info": f"https://www.twilio.com/docs/errors/{code}",
        "status": status,
    }
