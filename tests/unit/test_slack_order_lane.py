"""Which Slack requests are processed one after another (``order_lane``): everything about one thread, by its root."""

from __future__ import annotations

from typing import Any

from decklog.adapters.slack.intake import order_lane


def event(**fields: Any) -> dict[str, Any]:
    return {"type": "event_callback", "event_id": "Ev1", "event": fields}


def test_a_threads_messages_edits_deletes_and_reactions_share_its_lane() -> None:
    root = "1700000000.000100"
    assert order_lane(event(type="message", channel="C1", ts=root)) == f"C1:{root}"  # the root itself
    assert order_lane(event(type="message", channel="C1", ts="1700000001.000200", thread_ts=root)) == f"C1:{root}"
    assert order_lane(event(type="app_mention", channel="C1", ts="1700000002.0003", thread_ts=root)) == f"C1:{root}"
    edited = event(type="message", subtype="message_changed", channel="C1", message={"ts": "1.2", "thread_ts": root})
    deleted = event(
        type="message", subtype="message_deleted", channel="C1", previous_message={"ts": "1.2", "thread_ts": root}
    )
    assert order_lane(edited) == order_lane(deleted) == f"C1:{root}"
    reaction = event(type="reaction_added", item={"type": "message", "channel": "C1", "ts": root})
    assert order_lane(reaction) == f"C1:{root}"
    # a pin names its channel on the event (``channel_id``) and carries the message, reply or root, in the item
    reply = {"type": "message", "ts": "1700000003.0004", "thread_ts": root}
    assert order_lane(event(type="pin_added", channel_id="C1", item={"type": "message", "message": reply})) == (
        f"C1:{root}"
    )


def test_other_threads_channels_and_requests_are_not_ordered_together() -> None:
    assert order_lane(event(type="message", channel="C1", ts="2.0", thread_ts="1.0")) != order_lane(
        event(type="message", channel="C2", ts="2.0", thread_ts="1.0")
    )
    assert order_lane({"command": "/incident", "trigger_id": "t"}) is None
    assert order_lane({"type": "block_actions", "trigger_id": "t"}) is None
    assert order_lane(event(type="app_home_opened", user="U1")) is None
