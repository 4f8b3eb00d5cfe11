"""People and channels of the fake workspace, and who is a member of what.

Lookups accept an id (``U0ALICE``, ``C0ALERTS``) or a name (``alice``, ``#alerts`` / ``alerts``) and raise
Slack's own error codes (``user_not_found``, ``channel_not_found``, ``name_taken``, ...).
"""

from __future__ import annotations

import re
from typing import Any

from .changes import Change, ChangeFeed
from .errors import SlackError
from .ids import IdMint, TsClock
from .model import Channel, Identity, User
from .records import check_type, record_from_dict, record_to_dict

__all__ = ["Directory"]

_CHANNEL_NAME = re.compile(r"^[a-z0-9_\-\u00c0-\uffff]+$")


class Directory:
    def __init__(self, *, identity: Identity, ids: IdMint, clock: TsClock, feed: ChangeFeed) -> None:
        self._identity = identity
        self._ids = ids
        self._clock = clock
        self._feed = feed
        self._users: dict[str, User] = {}
        self._channels: dict[str, Channel] = {}
        self._ims: dict[str, str] = {}  # user id -> id of their DM channel with the bot

    # -- users -----------------------------------------------------------------------------------------------

    def add_user(
        self,
        name: str,
        *,
        user_id: str | None = None,
        real_name: str | None = None,
        is_bot: bool = False,
        bot_id: str | None = None,
    ) -> User:
        if any(u.name == name for u in self._users.values()):
            raise SlackError("name_taken", f"a user named {name!r} exists")
        user = User(
            id=user_id or self._ids.mint("U"),
            name=name,
            real_name=real_name or name.title(),
            team_id=self._identity.team_id,
            is_bot=is_bot,
            bot_id=bot_id,
        )
        if user.id in self._users:
            raise SlackError("name_taken", f"user id {user.id} exists")
        self._users[user.id] = user
        return user

    def user(self, ref: str) -> User:
        """The user with this id or name (``"U0ALICE"``, ``"alice"``, ``"@alice"``)."""
        found = self._users.get(ref) or next((u for u in self._users.values() if u.name == ref.lstrip("@")), None)
        if found is None:
            raise SlackError("user_not_found")
        return found

    def users(self) -> list[User]:
        return list(self._users.values())

    # -- channels --------------------------------------------------------------------------------------------

    def create_channel(
        self,
        name: str,
        *,
        creator: str,
        is_private: bool = False,
        channel_id: str | None = None,
        members: tuple[str, ...] = (),
    ) -> Channel:
        name = name.lstrip("#")
        if not name:
            raise SlackError("invalid_name_required")
        if len(name) > 80:
            raise SlackError("invalid_name_maxlength")
        if not _CHANNEL_NAME.match(name):
            raise SlackError("invalid_name_specials")
        if any(c.name == name and not c.is_im for c in self._channels.values()):
            raise SlackError("name_taken")
        channel = Channel(
            id=channel_id or self._ids.mint("G" if is_private else "C"),
            name=name,
            created=int(self._clock.now()),
            creator=creator,
            is_private=is_private,
            members=[creator, *(m for m in members if m != creator)],
        )
        self._channels[channel.id] = channel
        self._feed.emit(Change("channel_created", channel=channel.id, user=creator, data=channel.to_api()))
        return channel

    def channel(self, ref: str) -> Channel:
        """The channel with this id or name (``"C0ALERTS"``, ``"#alerts"``, ``"alerts"``)."""
        found = self._channels.get(ref)
        if found is None:
            name = ref.lstrip("#")
            found = next((c for c in self._channels.values() if c.name == name and not c.is_im), None)
        if found is None:
            raise SlackError("channel_not_found")
        return found

    def channels(self) -> list[Channel]:
        return list(self._channels.values())

    def im_with(self, user_id: str) -> Channel:
        """The direct-message channel between ``user_id`` and the bot (the App Home's Messages tab)."""
        channel_id = self._ims.get(user_id)
        if channel_id is None:
            channel_id = self._ids.mint("D")
            self._channels[channel_id] = Channel(
                id=channel_id,
                name=channel_id,
                created=int(self._clock.now()),
                creator=user_id,
                is_im=True,
                is_private=True,
                members=[user_id, self._identity.bot_user_id],
            )
            self._ims[user_id] = channel_id
        return self._channels[channel_id]

    def is_member(self, channel_id: str, user_id: str) -> bool:
        return user_id in self.channel(channel_id).members

    def join(self, channel_id: str, user_id: str) -> bool:
        """Adds ``user_id``; ``False`` when already a member."""
        channel = self.channel(channel_id)
        if user_id in channel.members:
            return False
        channel.members.append(user_id)
        self._feed.emit(Change("member_joined", channel=channel.id, user=user_id, data=channel.to_api()))
        return True

    def archive(self, channel_id: str, user_id: str) -> Channel:
        """conversations.archive's effect (its checks are the method's): the channel is archived, read-only."""
        channel = self.channel(channel_id)
        channel.is_archived = True
        self._feed.emit(Change("channel_archived", channel=channel.id, user=user_id, data=channel.to_api()))
        return channel

    # -- round trip ------------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """People, channels (direct-message channels included) and who has which DM, as plain data."""
        return {
            "users": [record_to_dict(u) for u in self._users.values()],
            "channels": [record_to_dict(c) for c in self._channels.values()],
            "ims": dict(self._ims),
        }

    def load_dict(self, data: Any) -> None:
        """Replace everything with :meth:`to_dict`'s data (all or nothing); ``ValueError`` when it is not that."""
        if not isinstance(data, dict):
            raise ValueError("the directory must be an object")
        users = [record_from_dict(User, u) for u in _list(data, "users")]
        channels = [record_from_dict(Channel, c) for c in _list(data, "channels")]
        ims = data.get("ims", {})
        check_type(ims, "dict[str, str]", "directory.ims")
        by_id = {c.id: c for c in channels}
        if len(by_id) != len(channels) or len({u.id for u in users}) != len(users):
            raise ValueError("the directory repeats a user or channel id")
        if any(by_id.get(cid) is None or not by_id[cid].is_im for cid in ims.values()):
            raise ValueError("directory.ims names a channel that is not a direct-message channel")
        self._users = {u.id: u for u in users}
        self._channels = by_id
        self._ims = dict(ims)


def _list(data: dict[str, Any], name: str) -> list[Any]:
    value = data.get(name)
    if not isinstance(value, list):
        raise ValueError(f"{name} must be a list")
    return value
