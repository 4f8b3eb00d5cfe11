"""For every renderer: no text people, alerts or a model wrote reaches Slack's mrkdwn raw.

Each entry kind the thread shows (``REPLIES``), the header, a proposal's message and its outcome, and App Home are
rendered with ``<!channel> <@U0BOB> <https://evil.example|click>`` in every text field; the fallback ``text`` and
every mrkdwn text in the blocks must show it escaped. The end-to-end test (tests/e2e/test_slack_escaping.py) drives
a declare and an alert through the real doors; this one covers the kinds no single run shows.
"""

from __future__ import annotations

import typing
from datetime import UTC, datetime
from typing import Any

import pytest

from decklog.adapters.slack import render
from decklog.adapters.slack.render.lifecycle import lifecycle_reply
from decklog.adapters.slack.render.replies import REPLIES
from decklog.core.entries import Actor, Entry, ProposalMade
from decklog.core.entries.lifecycle import ArchiveNotice, Reminder
from decklog.core.state import ScopeState
from decklog.core.state.model import ObligationState
from decklog.core.store.ports import ScopeRow

HOSTILE = "<!channel> <@U0BOB> <https://evil.example|click>"
RAW = ("<!channel>", "<@U0BOB>", "<https://evil.example")
#: Fields a renderer branches on (it shows nothing, or looks the value up), given a value that renders.
SHOWN = {
    "ts": "",
    "fingerprint": "",
    "sender": "pagerduty",
    "outcome": "failed",
    "thread_ts": "",
    "expires_at": "2026-12-07T10:00:00Z",
    "due_at": "2026-12-08T10:00:00Z",
    "lease_until": "2026-12-07T10:00:00Z",
}


def hostile(cls: Any) -> Any:
    values: dict[str, Any] = {}
    for name, field in cls.model_fields.items():
        kind = field.annotation
        origin, args = typing.get_origin(kind), typing.get_args(kind)
        if name in SHOWN and (kind is str or origin is typing.Literal):
            values[name] = SHOWN[name] if kind is str or SHOWN[name] in args else args[0]
        elif origin is typing.Literal:
            values[name] = args[0]
        elif kind is str:
            values[name] = HOSTILE
        elif origin is tuple and args[:1] == (str,):
            values[name] = (HOSTILE,)
        elif kind is int:
            values[name] = 3
        elif kind is float or kind == float | None:
            values[name] = 0.5
        elif field.default is not None and not field.is_required():
            values[name] = field.get_default(call_default_factory=True)
    return cls.model_construct(**values)


def state() -> ScopeState:
    return ScopeState(
        scope="incident/x",
        kind="incident",
        title=HOSTILE,
        status="investigating",
        severity=2,
        obligations={"o1": ObligationState.model_construct(id="o1", text=HOSTILE, holder=HOSTILE, status="open")},
    )


def entry(payload: Any) -> Entry:
    return Entry(
        scope="incident/x",
        seq=3,
        id="e3",
        kind="k",
        at=datetime(2026, 12, 7, tzinfo=UTC),
        actor=Actor.agent(HOSTILE),
        payload=payload,
    )


def mrkdwn(out: render.Outgoing) -> list[str]:
    """The fallback text and every mrkdwn text of the blocks (plain_text is never read as markup)."""
    found = [out.text]

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if value.get("type") == "mrkdwn" and isinstance(value.get("text"), str):
                found.append(value["text"])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(out.blocks)
    return found


def assert_escaped(out: render.Outgoing | None, what: str) -> None:
    assert out is not None, what
    leaks = [t for t in mrkdwn(out) if any(r in t for r in RAW)]
    assert not leaks, (what, leaks)


@pytest.mark.parametrize("cls", list(REPLIES), ids=lambda c: c.__name__)
def test_every_thread_reply_escapes_what_people_and_alerts_wrote(cls: Any) -> None:
    payload = hostile(cls)
    if cls.__name__ == "Observation":
        payload = payload.model_copy(update={"source": "decklog:alerts", "data": {"summary": {"total": 1}}})
    out = render.entry_reply(entry(payload), state())
    if out is None:
        pytest.skip(f"{cls.__name__} shows nothing in the thread with these values")
    assert_escaped(out, cls.__name__)


def test_observations_and_lifecycle_notices_escape_their_text() -> None:
    observed = hostile(next(c for c in REPLIES if c.__name__ == "Observation"))
    assert_escaped(render.entry_reply(entry(observed), state()), "observation")
    for cls in (ArchiveNotice, Reminder):
        payload = hostile(cls).model_copy(update={"users": ("U0ALICE",)} if cls is Reminder else {})
        assert_escaped(lifecycle_reply(entry(payload)), cls.__name__)


def test_the_header_and_proposals_and_app_home_escape_what_people_wrote() -> None:
    assert_escaped(render.header(state()), "header")
    proposal = hostile(ProposalMade).model_copy(update={"status": "waiting_for_approval"})
    assert_escaped(render.proposal_message(proposal, state(), entry(proposal)), "proposal")
    assert_escaped(render.proposal_outcome(proposal, f"Denied — {HOSTILE}", "<@U0ALICE>"), "proposal outcome")
    row = ScopeRow(
        id="incident/x",
        kind="incident",
        title=HOSTILE,
        status="open",
        severity=2,
        services=(),
        created_at="",
        updated_at="",
        resolved_at="",
        version=1,
        thread_channel="C1",
        thread_ts="1.0",
        permalink="https://x.slack.com/p1",
        pending_approvals=1,
    )
    home = render.home_view([row], [(row, [("p1", HOSTILE, "R2")])])
    assert_escaped(render.Outgoing("", home["blocks"]), "App Home")
