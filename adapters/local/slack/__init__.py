"""A fake Slack workspace on loopback, for decklog's tests and its local browser sandbox.

The real ``slack_sdk``/Bolt clients talk to it unchanged (``base_url``); it speaks Slack's wire formats (JSON,
form and query encodings, ``{"ok": false, "error"}`` shapes, 429 + ``Retry-After``, signed requests, Socket
Mode envelopes). It keeps no record of the calls and injects no faults: its server's ``middlewares`` are where a
test does that (``tests/fakes/slack_calls.py``, ``tests/fakes/slack_faults.py``).

- :class:`FakeSlackWorkspace` — the state: people, channels, messages, threads, reactions, views, files, and a
  live change feed.
- :class:`FakeSlackServer` — the Web API, uploads, ``response_url`` and Socket Mode, behind its ``middlewares``.
- :class:`SlackDriver` — Slack delivering signed HTTP requests (commands, events, interactions) to the app.
- :class:`FakeSlack` — all three together, as people doing things (post, react, click, submit) in HTTP or
  Socket Mode.
- :func:`workspace_snapshot` — the whole workspace as JSON, for a page that renders it.
"""

from .changes import Change, ChangeFeed
from .delivery import Delivered
from .driver import DriverResponse, SlackDriver
from .errors import SlackError
from .facade import FakeSlack, Outcome
from .model import Channel, Ephemeral, Identity, Message, SlackFile, User, View
from .responses import RecordedResponse
from .server import FakeSlackServer
from .signing import sign, signed_headers
from .snapshot import workspace_snapshot
from .workspace import FakeSlackWorkspace

__all__ = [
    "Change",
    "ChangeFeed",
    "Channel",
    "Delivered",
    "DriverResponse",
    "Ephemeral",
    "FakeSlack",
    "FakeSlackServer",
    "FakeSlackWorkspace",
    "Identity",
    "Message",
    "Outcome",
    "RecordedResponse",
    "SlackDriver",
    "SlackError",
    "SlackFile",
    "User",
    "View",
    "sign",
    "signed_headers",
    "workspace_snapshot",
]
