"""``FakeSlackWorkspace``: the whole state of the fake Slack workspace, in memory, with no I/O.

It is what the fake server serves and what tests and the local sandbox inspect: people (the bot user
``U0BOT``/``B0BOT`` "decklog" and seeded humans alice, bob, carol), channels (``#alerts`` ``C0ALERTS``,
``#general`` ``C0GENERAL``), messages and threads, reactions, ephemeral messages, modals and App Home views,
files, trigger ids, and a live change feed (``add_listener`` / ``subscribe``).

>>> ws = FakeSlackWorkspace()
>>> msg = ws.post_as_user("alice", "#alerts", "payments are down")
>>> [m.text for m in ws.history("C0ALERTS")]
['payments are down']
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from .changes import Change, ChangeFeed
from .directory import Directory
from .file_store import FileStore
from .ids import IdMint, TsClock
from .message_store import MessageStore
from .model import Channel, Ephemeral, Identity, Message, User, View
from .triggers import TriggerBook
from .view_store import ViewStore

__all__ = ["FakeSlackWorkspace"]

JSON = dict[str, Any]

_SEED_USERS = (
    ("U0ALICE", "alice", "Alice Archer"),
    ("U0BOB", "bob", "Bob Baker"),
    ("U0CAROL", "carol", "Carol Chen"),
)
_SEED_CHANNELS = (("C0ALERTS", "alerts"), ("C0GENERAL", "general"))


class FakeSlackWorkspace:
    def __init__(
        self,
        *,
        identity: Identity | None = None,
        ts_start: float | None = None,
        trigger_ttl: float = 3.0,
        seed: bool = True,
    ) -> None:
        self.identity = identity or Identity()
        self.clock = TsClock(start=ts_start)
        self.ids = IdMint()
        self.feed = ChangeFeed()
        self.directory = Directory(identity=self.identity, ids=self.ids, clock=self.clock, feed=self.feed)
        self.messages = MessageStore(identity=self.identity, clock=self.clock, feed=self.feed)
        self.views = ViewStore(identity=self.identity, ids=self.ids, feed=self.feed, new_hash=self._new_hash)
        self.files = FileStore(ids=self.ids, clock=self.clock, feed=self.feed)
        self.triggers = TriggerBook(ttl=trigger_ttl)
        self.bot_user = self.directory.add_user(
            self.identity.bot_name,
            user_id=self.identity.bot_user_id,
            real_name=self.identity.bot_name,
            is_bot=True,
            bot_id=self.identity.bot_id,
        )
        if seed:
            self._seed()

    def _seed(self) -> None:
        humans = tuple(self.directory.add_user(name, user_id=uid, real_name=real).id for uid, name, real in _SEED_USERS)
        for channel_id, name in _SEED_CHANNELS:
            self.directory.create_channel(
                name, creator=humans[0], channel_id=channel_id, members=(*humans, self.identity.bot_user_id)
            )

    def _new_hash(self) -> str:
        return f"{self.clock.next().split('.')[0]}.{self.ids.token(4)}"

    # -- people and channels ---------------------------------------------------------------------------------

    @property
    def bot_user_id(self) -> str:
        return self.identity.bot_user_id

    def user(self, ref: str) -> User:
        return self.directory.user(ref)

    def add_user(self, name: str, *, user_id: str | None = None, real_name: str | None = None) -> User:
        return self.directory.add_user(name, user_id=user_id, real_name=real_name)

    def channel(self, ref: str) -> Channel:
        return self.directory.channel(ref)

    def create_channel(
        self,
        name: str,
        *,
        creator: str | None = None,
        is_private: bool = False,
        members: tuple[str, ...] = (),
    ) -> Channel:
        creator_id = self.user(creator).id if creator else self.bot_user_id
        member_ids = tuple(self.user(m).id for m in members)
        return self.directory.create_channel(name, creator=creator_id, is_private=is_private, members=member_ids)

    # -- messages --------------------------------------------------------------------------------------------

    def post_as_user(
        self,
        user: str,
        channel: str,
        text: str,
        *,
        thread_ts: str | None = None,
        blocks: list[JSON] | None = None,
    ) -> Message:
        """A person posts (joining the channel if needed), with ``rich_text`` blocks and a client id."""
        person, room = self.user(user), self.channel(channel)
        self.directory.join(room.id, person.id)
        rich = blocks or [
            {
                "type": "rich_text",
                "block_id": self.ids.token(3),
                "elements": [{"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}],
            }
        ]
        return self.messages.post(
            room.id,
            text=text,
            user=person.id,
            as_bot=False,
            blocks=rich,
            thread_ts=thread_ts,
            client_msg_id=str(uuid.uuid4()),
        )

    def post_as_bot(self, channel: str, text: str, **fields: Any) -> Message:
        """The app posts, bypassing the Web API (to set up a scene); ``fields`` as ``MessageStore.post``."""
        return self.messages.post(self.channel(channel).id, text=text, user=self.bot_user_id, as_bot=True, **fields)

    def message(self, channel: str, ts: str) -> Message:
        return self.messages.get(self.channel(channel).id, ts)

    def history(self, channel: str) -> list[Message]:
        """Top-level messages (and thread broadcasts), oldest first."""
        return self.messages.top_level(self.channel(channel).id)

    def thread(self, channel: str, ts: str) -> list[Message]:
        """A thread's parent then its replies, oldest first."""
        return self.messages.thread(self.channel(channel).id, ts)

    def bot_messages(self, channel: str | None = None) -> list[Message]:
        """Everything the app posted (replies included), oldest first."""
        channel_id = self.channel(channel).id if channel else None
        return [m for m in self.messages.all(channel_id) if m.bot_id == self.identity.bot_id]

    def ephemerals(self, *, channel: str | None = None, user: str | None = None) -> list[Ephemeral]:
        return self.messages.ephemerals(
            channel=self.channel(channel).id if channel else None, user=self.user(user).id if user else None
        )

    # -- views and triggers ----------------------------------------------------------------------------------

    def home(self, user: str) -> View | None:
        return self.views.home(self.user(user).id)

    def modals(self, user: str) -> list[View]:
        """The person's open modal stack, bottom first."""
        return self.views.stack(self.user(user).id)

    def issue_trigger(self, user: str) -> str:
        return self.triggers.issue(self.user(user).id)

    # -- live changes ----------------------------------------------------------------------------------------

    def add_listener(self, callback: Callable[[Change], None]) -> None:
        self.feed.add_listener(callback)

    def remove_listener(self, callback: Callable[[Change], None]) -> None:
        self.feed.remove_listener(callback)

    def subscribe(self) -> asyncio.Queue[Change]:
        return self.feed.subscribe()

    def unsubscribe(self, queue: asyncio.Queue[Change]) -> None:
        self.feed.unsubscribe(queue)
