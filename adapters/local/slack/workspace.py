"""``FakeSlackWorkspace``: the whole state of the fake Slack workspace, in memory, with no I/O.

It is what the fake server serves and what tests and the local sandbox inspect: people (the bot user
``U0BOT``/``B0BOT`` "decklog" and seeded humans alice, bob, carol), channels (``#alerts`` ``C0ALERTS``,
``#general`` ``C0GENERAL``), messages and threads, reactions, ephemeral messages, modals and App Home views,
files, trigger ids, and a live change feed (``add_listener`` / ``subscribe``).

``to_dict`` / ``from_dict`` (and ``load_dict``, in place) round-trip the whole state through plain JSON-ready
data — people, channels, messages, threads, reactions, metadata, files, ephemerals, App Home tabs and modals,
the ts clock and the id counters, so a restored workspace never mints an id or a ts it minted before. Trigger
ids and the change feed's history are per-process and not part of it; neither are tokens or secrets (the
workspace holds none). Keeping the data somewhere is the caller's business.

>>> ws = FakeSlackWorkspace()
>>> msg = ws.post_as_user("alice", "#alerts", "payments are down")
>>> [m.text for m in ws.history("C0ALERTS")]
['payments are down']
>>> [m.text for m in FakeSlackWorkspace.from_dict(ws.to_dict()).history("C0ALERTS")]
['payments are down']
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

from .changes import Change, ChangeFeed
from .directory import Directory
from .file_store import FileStore
from .ids import IdMint, TsClock
from .message_store import MessageStore
from .model import Channel, Ephemeral, Identity, Message, User, View
from .records import record_from_dict
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
STATE_FORMAT = "decklog-fake-slack-workspace"
STATE_VERSION = 1


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

    # -- round trip ------------------------------------------------------------------------------------------

    def to_dict(self) -> JSON:
        """The whole workspace as JSON-ready data (a deep copy); :meth:`from_dict` rebuilds it exactly."""
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "identity": dataclasses.asdict(self.identity),
            "clock": self.clock.to_dict(),
            "ids": self.ids.to_dict(),
            "directory": self.directory.to_dict(),
            "messages": self.messages.to_dict(),
            "views": self.views.to_dict(),
            "files": self.files.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Any, *, trigger_ttl: float = 3.0) -> FakeSlackWorkspace:
        """A workspace rebuilt from :meth:`to_dict`'s data; ``ValueError`` when ``data`` is not such data (another
        format or version, a damaged record, a reference to nothing)."""
        if not isinstance(data, dict):
            raise ValueError("a workspace state must be an object")
        if data.get("format") != STATE_FORMAT:
            raise ValueError(f"not a fake Slack workspace state (format {data.get('format')!r})")
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"workspace state version {data.get('version')!r} is not {STATE_VERSION}")
        workspace = cls(identity=record_from_dict(Identity, data.get("identity")), trigger_ttl=trigger_ttl, seed=False)
        workspace._load_state(data)
        return workspace

    def load_dict(self, data: Any) -> None:
        """Replace this workspace's state, in place, with :meth:`to_dict`'s data (all or nothing), keeping the
        objects that servers and listeners hold; emits one ``workspace_loaded`` change. ``ValueError`` when
        ``data`` does not fit (see :meth:`from_dict`) or belongs to another team or app."""
        checked = type(self).from_dict(data)  # every check, on a throwaway copy: a bad state changes nothing here
        if checked.identity != self.identity:
            raise ValueError(
                f"the state is of another workspace ({checked.identity.team_id}/{checked.identity.app_id})"
            )
        self._load_state(data)
        self.feed.emit(Change("workspace_loaded"))

    def _load_state(self, data: JSON) -> None:
        for name in ("clock", "ids", "directory", "messages", "views", "files"):
            if not isinstance(data.get(name), dict):
                raise ValueError(f"the workspace state has no {name}")
        self.clock.load_dict(data["clock"])
        self.ids.load_dict(data["ids"])
        self.directory.load_dict(data["directory"])
        self.messages.load_dict(data["messages"])
        self.views.load_dict(data["views"])
        self.files.load_dict(data["files"])
        known = {c.id for c in self.directory.channels()}
        strays = {m.channel for m in self.messages.all()} - known
        if strays:
            raise ValueError(f"messages in unknown channels: {', '.join(sorted(strays))}")
        bot = next((u for u in self.directory.users() if u.id == self.identity.bot_user_id), None)
        if bot is None:
            raise ValueError(f"the state has no bot user {self.identity.bot_user_id}")
        self.bot_user = bot

    # -- live changes ----------------------------------------------------------------------------------------

    def add_listener(self, callback: Callable[[Change], None]) -> None:
        self.feed.add_listener(callback)

    def remove_listener(self, callback: Callable[[Change], None]) -> None:
        self.feed.remove_listener(callback)

    def subscribe(self) -> asyncio.Queue[Change]:
        return self.feed.subscribe()

    def unsubscribe(self, queue: asyncio.Queue[Change]) -> None:
        self.feed.unsubscribe(queue)
