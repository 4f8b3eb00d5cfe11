"""Messages, threads, reactions and ephemeral messages of the fake workspace.

Threads behave as on Slack: a reply carries ``thread_ts`` (the parent's ``ts``) and ``parent_user_id``; the
parent gets ``thread_ts``, ``reply_count``, ``reply_users`` and ``latest_reply``. Deleting a parent that has
replies leaves a tombstone. Every change is emitted on the feed.
"""

from __future__ import annotations

from typing import Any

from .changes import Change, ChangeFeed
from .errors import SlackError
from .ids import TsClock, parse_ts
from .model import Ephemeral, Identity, Message
from .records import record_from_dict, record_to_dict

__all__ = ["MessageStore"]

JSON = dict[str, Any]


class MessageStore:
    def __init__(self, *, identity: Identity, clock: TsClock, feed: ChangeFeed) -> None:
        self._identity = identity
        self._clock = clock
        self._feed = feed
        self._by_channel: dict[str, dict[str, Message]] = {}  # insertion order is ts order
        self._ephemerals: list[Ephemeral] = []

    # -- reading ---------------------------------------------------------------------------------------------

    def get(self, channel: str, ts: str) -> Message:
        message = self._by_channel.get(channel, {}).get(ts)
        if message is None:
            raise SlackError("message_not_found")
        return message

    def find(self, channel: str, ts: str) -> Message | None:
        return self._by_channel.get(channel, {}).get(ts)

    def top_level(self, channel: str) -> list[Message]:
        """What ``conversations.history`` lists, oldest first: no thread replies except broadcasts."""
        return [
            m
            for m in list(self._by_channel.get(channel, {}).values())
            if not m.is_reply or m.subtype == "thread_broadcast"
        ]

    def thread(self, channel: str, ts: str) -> list[Message]:
        """The parent then its replies, oldest first; ``thread_not_found`` when ``ts`` is unknown."""
        message = self.find(channel, ts)
        if message is None:
            raise SlackError("thread_not_found")
        root_ts = message.thread_ts or message.ts
        root = self.find(channel, root_ts)
        replies = [m for m in list(self._by_channel.get(channel, {}).values()) if m.is_reply and m.thread_ts == root_ts]
        return ([root] if root is not None else []) + replies

    def all(self, channel: str | None = None) -> list[Message]:
        channels = [channel] if channel is not None else list(self._by_channel)
        return [m for c in channels for m in list(self._by_channel.get(c, {}).values())]

    # -- writing ---------------------------------------------------------------------------------------------

    def post(
        self,
        channel: str,
        *,
        text: str,
        user: str | None,
        as_bot: bool,
        blocks: list[JSON] | None = None,
        attachments: list[JSON] | None = None,
        thread_ts: str | None = None,
        metadata: JSON | None = None,
        reply_broadcast: bool = False,
        files: list[JSON] | None = None,
        client_msg_id: str | None = None,
    ) -> Message:
        parent = None
        if thread_ts is not None:
            parent = self.find(channel, thread_ts)
            if parent is None:
                raise SlackError("thread_not_found", f"no message {thread_ts} in {channel} to reply to")
            if parent.is_reply:
                parent = self.get(channel, str(parent.thread_ts))
        message = Message(
            channel=channel,
            ts=self._clock.next(),
            text=text,
            user=user,
            bot_id=self._identity.bot_id if as_bot else None,
            app_id=self._identity.app_id if as_bot else None,
            team=self._identity.team_id,
            blocks=blocks,
            attachments=attachments,
            metadata=metadata,
            files=list(files or []),
            client_msg_id=client_msg_id,
        )
        if parent is not None:
            message.thread_ts = parent.ts
            message.parent_user_id = parent.user
            if reply_broadcast:
                message.subtype = "thread_broadcast"
        self._by_channel.setdefault(channel, {})[message.ts] = message
        self._feed.emit(Change("message_posted", channel=channel, ts=message.ts, user=user, data=message.to_api()))
        if parent is not None:
            parent.thread_ts = parent.ts
            parent.reply_count += 1
            parent.latest_reply = message.ts
            if user is not None and user not in parent.reply_users:
                parent.reply_users.append(user)
            self._feed.emit(Change("message_replied", channel=channel, ts=parent.ts, data=parent.to_api()))
        return message

    def update(
        self,
        channel: str,
        ts: str,
        *,
        editor: str,
        text: str | None = None,
        blocks: list[JSON] | None = None,
        attachments: list[JSON] | None = None,
        metadata: JSON | None = None,
        files: list[JSON] | None = None,
    ) -> tuple[JSON, Message]:
        """Edits a message in place; returns (the previous wire shape, the message)."""
        message = self.get(channel, ts)
        previous = message.to_api()
        if text is not None:
            message.text = text
        if blocks is not None:
            message.blocks = blocks
        if attachments is not None:
            message.attachments = attachments
        if metadata is not None:
            message.metadata = metadata
        if files is not None:
            message.files = files
        message.edited = {"user": editor, "ts": self._clock.next()}
        self._feed.emit(Change("message_changed", channel=channel, ts=ts, user=editor, data=message.to_api()))
        return previous, message

    def delete(self, channel: str, ts: str) -> JSON:
        """Deletes a message (a parent with replies becomes a tombstone); returns its previous wire shape."""
        message = self.get(channel, ts)
        previous = message.to_api()
        if message.reply_count and not message.is_reply:
            message.subtype = "tombstone"
            message.text = "This message was deleted."
            message.user, message.bot_id, message.app_id = "USLACKBOT", None, None
            message.blocks = message.attachments = message.metadata = None
            message.files, message.reactions = [], {}
        else:
            del self._by_channel[channel][ts]
            if message.is_reply:
                self._forget_reply(channel, message)
        self._feed.emit(Change("message_deleted", channel=channel, ts=ts, data=previous))
        return previous

    def _forget_reply(self, channel: str, reply: Message) -> None:
        parent = self.find(channel, str(reply.thread_ts))
        if parent is None:
            return
        replies = [m for m in list(self._by_channel[channel].values()) if m.is_reply and m.thread_ts == parent.ts]
        parent.reply_count = len(replies)
        parent.latest_reply = replies[-1].ts if replies else None
        parent.reply_users = list(dict.fromkeys(m.user for m in replies if m.user))
        self._feed.emit(Change("message_replied", channel=channel, ts=parent.ts, data=parent.to_api()))

    # -- reactions -------------------------------------------------------------------------------------------

    def add_reaction(self, channel: str, ts: str, name: str, user: str) -> Message:
        message = self.get(channel, ts)
        users = message.reactions.setdefault(name, [])
        if user in users:
            raise SlackError("already_reacted")
        users.append(user)
        self._feed.emit(Change("reaction_added", channel=channel, ts=ts, user=user, data=message.to_api()))
        return message

    def remove_reaction(self, channel: str, ts: str, name: str, user: str) -> Message:
        message = self.get(channel, ts)
        users = message.reactions.get(name, [])
        if user not in users:
            raise SlackError("no_reaction")
        users.remove(user)
        if not users:
            del message.reactions[name]
        self._feed.emit(Change("reaction_removed", channel=channel, ts=ts, user=user, data=message.to_api()))
        return message

    # -- ephemeral messages ----------------------------------------------------------------------------------

    def post_ephemeral(
        self,
        channel: str,
        user: str,
        *,
        text: str,
        blocks: list[JSON] | None = None,
        thread_ts: str | None = None,
    ) -> Ephemeral:
        ephemeral = Ephemeral(
            channel=channel, user=user, ts=self._clock.next(), text=text, blocks=blocks, thread_ts=thread_ts
        )
        self._ephemerals.append(ephemeral)
        self._feed.emit(
            Change("ephemeral_posted", channel=channel, ts=ephemeral.ts, user=user, data=ephemeral.to_api())
        )
        return ephemeral

    def ephemerals(self, *, channel: str | None = None, user: str | None = None) -> list[Ephemeral]:
        return [
            e
            for e in self._ephemerals
            if (channel is None or e.channel == channel) and (user is None or e.user == user)
        ]

    def find_ephemeral(self, ts: str) -> Ephemeral | None:
        return next((e for e in self._ephemerals if e.ts == ts), None)

    def replace_ephemeral(self, ts: str, *, text: str, blocks: list[JSON] | None) -> Ephemeral | None:
        ephemeral = self.find_ephemeral(ts)
        if ephemeral is not None:
            ephemeral.text, ephemeral.blocks = text, blocks
            self._feed.emit(
                Change(
                    "ephemeral_replaced",
                    channel=ephemeral.channel,
                    ts=ts,
                    user=ephemeral.user,
                    data=ephemeral.to_api(),
                )
            )
        return ephemeral

    def delete_ephemeral(self, ts: str) -> None:
        ephemeral = self.find_ephemeral(ts)
        if ephemeral is not None:
            self._ephemerals.remove(ephemeral)
            self._feed.emit(Change("ephemeral_deleted", channel=ephemeral.channel, ts=ts, user=ephemeral.user))

    # -- round trip ------------------------------------------------------------------------------------------

    def to_dict(self) -> JSON:
        """Every message per channel (in order, threads, reactions, metadata, files) and every ephemeral."""
        return {
            "channels": {
                c: [record_to_dict(m) for m in list(by_ts.values())] for c, by_ts in list(self._by_channel.items())
            },
            "ephemerals": [record_to_dict(e) for e in list(self._ephemerals)],
        }

    def load_dict(self, data: Any) -> None:
        """Replace everything with :meth:`to_dict`'s data (all or nothing); ``ValueError`` when it is not that."""
        if not isinstance(data, dict) or not isinstance(data.get("channels"), dict):
            raise ValueError("the messages must be an object with channels")
        by_channel: dict[str, dict[str, Message]] = {}
        for channel, messages in data["channels"].items():
            if not isinstance(messages, list):
                raise ValueError(f"the messages of {channel} must be a list")
            by_ts: dict[str, Message] = {}
            for raw in messages:
                message = record_from_dict(Message, raw)
                if message.channel != channel or message.ts in by_ts:
                    raise ValueError(f"message {message.ts} is misfiled or repeated in {channel}")
                parse_ts(message.ts)
                by_ts[message.ts] = message
            by_channel[channel] = by_ts
        ephemerals = data.get("ephemerals", [])
        if not isinstance(ephemerals, list):
            raise ValueError("the ephemerals must be a list")
        loaded = [record_from_dict(Ephemeral, e) for e in ephemerals]
        self._by_channel, self._ephemerals = by_channel, loaded
