"""``FakeSlack``: a whole fake Slack for e2e tests and the local sandbox — people doing things, the app told.

It combines a :class:`FakeSlackWorkspace` (state), a :class:`FakeSlackServer` (the Web API the app calls,
Socket Mode) and a :class:`Delivery` (HTTP signed POSTs to the app's ``/slack/events``, or Socket Mode
envelopes). Each person-level action changes the workspace as Slack would and then tells the app as Slack
would: ``post_message`` stores the message and delivers ``message`` (+ ``app_mention``); ``click_button``
finds the button in the stored blocks and delivers ``block_actions``; ``submit_view`` builds the modal's
state and applies the app's ``response_action``. The app hears only about channels its bot is a member of.

>>> slack = FakeSlack()                                                     # doctest: +SKIP
>>> base_url = await slack.start()             # give it to the app: AsyncWebClient(base_url=...)
>>> slack.use_http("http://127.0.0.1:8080/slack/events", signing_secret="s3cret")   # or use_socket_mode()
>>> posted = await slack.post_message("alice", "#alerts", "@decklog declare payments down")
>>> await wait_for(slack, lambda: slack.workspace.thread("#alerts", posted.ts)[1:])  # tests/fakes/polling.py
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TypeVar

from .acks import apply_command_ack, apply_submission_ack
from .blocks import action_entry, element_state, find_element, view_state_values
from .delivery import Delivered, Delivery
from .driver import DriverResponse, SlackDriver
from .model import Channel, Message, User, View
from .payloads import PayloadFactory
from .server import FakeSlackServer, Middleware
from .workspace import FakeSlackWorkspace

__all__ = ["FakeSlack", "Outcome"]

JSON = dict[str, Any]
T = TypeVar("T")
_BUTTON = frozenset({"button"})
_SELECTS = frozenset(
    {
        "static_select", "external_select", "users_select", "conversations_select", "channels_select",
        "overflow", "radio_buttons", "checkboxes", "multi_static_select", "multi_users_select", "datepicker",
    }
)  # fmt: skip


@dataclass
class Outcome:
    """What a person-level action did: the message it created or touched, and the app's answers."""

    responses: list[DriverResponse] = field(default_factory=list)
    message: Message | None = None
    view: View | None = None
    result: str | None = None  # for submit_view: closed, errors, updated, pushed, cleared, kept

    @property
    def ts(self) -> str:
        if self.message is None:
            raise AttributeError("this action did not create a message")
        return self.message.ts

    @property
    def status(self) -> int | None:
        """The first delivery's HTTP status (``None``: the app was not told; ``0``: no Socket Mode ack)."""
        return self.responses[0].status if self.responses else None


class FakeSlack:
    def __init__(
        self,
        workspace: FakeSlackWorkspace | None = None,
        *,
        bot_token: str | None = None,
        app_token: str | None = None,
        ack_timeout: float = 3.0,
        middlewares: Sequence[Middleware] = (),
    ) -> None:
        self.workspace = workspace or FakeSlackWorkspace()
        self.server = FakeSlackServer(self.workspace, bot_token=bot_token, app_token=app_token, middlewares=middlewares)
        self.delivery = Delivery(self.server, ack_timeout=ack_timeout)
        self.payloads = PayloadFactory(self.workspace)

    # -- lifecycle and wiring --------------------------------------------------------------------------------

    async def start(self) -> str:
        """Starts the server; returns the Web API base URL for the app's ``AsyncWebClient``."""
        return await self.server.start()

    async def stop(self) -> None:
        await self.delivery.close()
        await self.server.stop()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def use_http(self, events_url: str, signing_secret: str) -> SlackDriver:
        """Deliver to the app by signed HTTP POSTs to ``events_url`` (its ``/slack/events``)."""
        return self.delivery.use_http(events_url, signing_secret)

    async def use_socket_mode(self) -> None:
        """Deliver over the Socket Mode connection the app opens (``apps.connections.open``)."""
        await self.delivery.use_socket_mode()

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def driver(self) -> SlackDriver:
        if self.delivery.driver is None:
            raise RuntimeError("not in HTTP mode: call use_http(events_url, signing_secret) first")
        return self.delivery.driver

    @property
    def deliveries(self) -> list[Delivered]:
        return self.delivery.log

    # -- messages --------------------------------------------------------------------------------------------

    async def post_message(self, user: str, channel: str, text: str, thread_ts: str | None = None) -> Outcome:
        """A person posts. ``@name`` mentions are encoded as the Slack client does (``<@U0BOT>``)."""
        text = self._encode_mentions(text)
        message = self.workspace.post_as_user(user, channel, text, thread_ts=thread_ts)
        room = self.workspace.channel(message.channel)
        outcome = Outcome(message=message)
        if self._bot_hears(room):
            event = self.payloads.message_event(message, room)
            outcome.responses.append(await self.delivery.event(self.payloads.event_callback(event)))
            if f"<@{self.workspace.bot_user_id}>" in text:
                mention = self.payloads.app_mention_event(message)
                outcome.responses.append(await self.delivery.event(self.payloads.event_callback(mention)))
        return outcome

    async def edit_message(self, user: str, channel: str, ts: str, text: str) -> Outcome:
        person, room = self._who(user, channel)
        self._own(person, room, ts)
        previous, message = self.workspace.messages.update(
            room.id, ts, editor=person.id, text=self._encode_mentions(text)
        )
        outcome = Outcome(message=message)
        if self._bot_hears(room):
            event = self.payloads.message_changed_event(room, previous, message)
            outcome.responses.append(await self.delivery.event(self.payloads.event_callback(event)))
        return outcome

    async def delete_message(self, user: str, channel: str, ts: str) -> Outcome:
        person, room = self._who(user, channel)
        self._own(person, room, ts)
        previous = self.workspace.messages.delete(room.id, ts)
        outcome = Outcome()
        if self._bot_hears(room):
            event = self.payloads.message_deleted_event(room, previous)
            outcome.responses.append(await self.delivery.event(self.payloads.event_callback(event)))
        return outcome

    async def add_reaction(self, user: str, channel: str, ts: str, name: str) -> Outcome:
        return await self._react("reaction_added", user, channel, ts, name)

    async def remove_reaction(self, user: str, channel: str, ts: str, name: str) -> Outcome:
        return await self._react("reaction_removed", user, channel, ts, name)

    async def _react(self, kind: str, user: str, channel: str, ts: str, name: str) -> Outcome:
        person, room = self._who(user, channel)
        name = name.strip(":")
        store = self.workspace.messages
        if kind == "reaction_added":
            message = store.add_reaction(room.id, ts, name, person.id)
        else:
            message = store.remove_reaction(room.id, ts, name, person.id)
        outcome = Outcome(message=message)
        if self._bot_hears(room):
            event = self.payloads.reaction_event(kind, person, name, message)
            outcome.responses.append(await self.delivery.event(self.payloads.event_callback(event)))
        return outcome

    async def redeliver(
        self, delivered: Delivered, *, retry_num: int = 1, retry_reason: str = "http_timeout"
    ) -> DriverResponse:
        """Slack retries an event delivery: same payload and ``event_id``, with ``X-Slack-Retry-Num`` (HTTP)
        or ``retry_attempt`` (Socket Mode). Take ``delivered`` from :attr:`deliveries`."""
        return await self.delivery.redeliver(delivered, retry_num=retry_num, retry_reason=retry_reason)

    # -- commands and interactions ---------------------------------------------------------------------------

    async def run_command(self, user: str, channel: str, text: str, command: str = "/incident") -> Outcome:
        """A person types ``/incident text`` in ``channel`` (never in a thread: Slack has no such thing)."""
        person, room = self._who(user, channel)
        fields = self.payloads.slash_command(
            person,
            room,
            command=command,
            text=text,
            trigger_id=self.workspace.issue_trigger(person.id),
            response_url=self.server.response_url(room.id, person.id),
        )
        response = await self.delivery.command(fields)
        apply_command_ack(self.workspace, person, room, command, response)
        return Outcome(responses=[response])

    async def click_button(
        self, user: str, channel: str, message_ts: str, action_id: str, value: str | None = None
    ) -> Outcome:
        """A person clicks a button of a message (or of an ephemeral message they see)."""
        return await self._act_on_message(user, channel, message_ts, action_id, value, _BUTTON)

    async def select_option(self, user: str, channel: str, message_ts: str, action_id: str, value: Any) -> Outcome:
        """A person picks ``value`` (an option value, a user id, ...) in a select/overflow of a message."""
        return await self._act_on_message(user, channel, message_ts, action_id, value, _SELECTS)

    async def _act_on_message(
        self, user: str, channel: str, message_ts: str, action_id: str, choice: Any, types: frozenset[str]
    ) -> Outcome:
        person, room = self._who(user, channel)
        ephemeral = self.workspace.messages.find_ephemeral(message_ts)
        if ephemeral is not None and (ephemeral.user != person.id or ephemeral.channel != room.id):
            ephemeral = None
        stored = None if ephemeral is not None else self.workspace.messages.get(room.id, message_ts)
        blocks = (ephemeral.blocks if ephemeral is not None else stored.blocks if stored is not None else None) or []
        thread_ts = ephemeral.thread_ts if ephemeral is not None else stored.thread_ts if stored is not None else None
        block_id, element = find_element(blocks, action_id, value=choice if types is _BUTTON else None, types=types)
        action = action_entry(block_id, element, choice, self.workspace.clock.next())
        container: JSON = {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": room.id,
            "is_ephemeral": ephemeral is not None,
        }
        if thread_ts:
            container["thread_ts"] = thread_ts
        choices = {} if types is _BUTTON else {block_id: {action_id: choice}}
        payload = self.payloads.block_actions(
            person,
            actions=[action],
            trigger_id=self.workspace.issue_trigger(person.id),
            container=container,
            state_values=view_state_values(blocks, choices, enforce_required=False),
            channel=room,
            message=stored.to_api() if stored is not None else None,
            response_url=self.server.response_url(
                room.id,
                person.id,
                message_ts=message_ts,
                is_ephemeral=ephemeral is not None,
                thread_ts=thread_ts,
            ),
        )
        return Outcome(responses=[await self.delivery.interaction(payload)], message=stored)

    async def message_shortcut(self, user: str, channel: str, message_ts: str, callback_id: str) -> Outcome:
        """A person runs a message shortcut (the message's ⋮ menu) on a message of ``channel``."""
        person, room = self._who(user, channel)
        stored = self.workspace.messages.get(room.id, message_ts)
        if stored is None:
            raise ValueError(f"no message {message_ts} in {channel}")
        payload = self.payloads.message_action(
            person,
            room,
            stored.to_api(),
            callback_id=callback_id,
            trigger_id=self.workspace.issue_trigger(person.id),
            action_ts=self.workspace.clock.next(),
            response_url=self.server.response_url(room.id, person.id, thread_ts=stored.thread_ts),
        )
        return Outcome(responses=[await self.delivery.interaction(payload)], message=stored)

    async def click_view_button(self, user: str, view_id: str, action_id: str, value: str | None = None) -> Outcome:
        """A person clicks a button in their App Home tab or in an open modal."""
        return await self._act_on_view(user, view_id, action_id, value, _BUTTON)

    async def select_view_option(self, user: str, view_id: str, action_id: str, value: Any) -> Outcome:
        return await self._act_on_view(user, view_id, action_id, value, _SELECTS)

    async def _act_on_view(
        self, user: str, view_id: str, action_id: str, choice: Any, types: frozenset[str]
    ) -> Outcome:
        person, view = self._view_of(user, view_id)
        blocks = list(view.body.get("blocks", []))
        block_id, element = find_element(blocks, action_id, value=choice if types is _BUTTON else None, types=types)
        if types is not _BUTTON:  # a select in a modal keeps its choice in the view's state
            state = {"type": element.get("type"), **element_state(element, choice)}
            view.state_values.setdefault(block_id, {})[str(element.get("action_id"))] = state
        action = action_entry(block_id, element, choice, self.workspace.clock.next())
        payload = self.payloads.block_actions(
            person,
            actions=[action],
            trigger_id=self.workspace.issue_trigger(person.id),
            container={"type": "view", "view_id": view.id},
            state_values=dict(view.state_values),
            view=view,
        )
        return Outcome(responses=[await self.delivery.interaction(payload)], view=view)

    async def submit_view(self, user: str, view_id: str, values: dict[str, Any] | None = None) -> Outcome:
        """A person fills a modal (``values``: ``{block_id: value}`` or ``{block_id: {action_id: value}}``)
        and presses Submit; the app's ``response_action`` is applied to their modal stack."""
        person, view = self._view_of(user, view_id)
        view.state_values = view_state_values(list(view.body.get("blocks", [])), values or {})
        payload = self.payloads.view_submission(
            person, view.to_api(self.workspace.identity), trigger_id=self.workspace.issue_trigger(person.id)
        )
        response = await self.delivery.interaction(payload)
        result = apply_submission_ack(self.workspace, view, response)
        return Outcome(responses=[response], view=view, result=result)

    async def close_view(self, user: str, view_id: str) -> Outcome:
        """A person closes a modal; the app hears ``view_closed`` only if the view set ``notify_on_close``."""
        person, view = self._view_of(user, view_id)
        snapshot = view.to_api(self.workspace.identity)
        self.workspace.views.close(view.id)
        outcome = Outcome(view=view)
        if view.body.get("notify_on_close"):
            outcome.responses.append(await self.delivery.interaction(self.payloads.view_closed(person, snapshot)))
        return outcome

    async def open_home(self, user: str) -> Outcome:
        """A person opens the app's Home tab (``app_home_opened``)."""
        person = self.workspace.user(user)
        channel = self.workspace.directory.im_with(person.id)
        event = self.payloads.app_home_opened_event(person, channel, self.workspace.views.home(person.id))
        return Outcome(responses=[await self.delivery.event(self.payloads.event_callback(event))])

    # -- helpers ---------------------------------------------------------------------------------------------

    def _who(self, user: str, channel: str) -> tuple[User, Channel]:
        return self.workspace.user(user), self.workspace.channel(channel)

    def _bot_hears(self, channel: Channel) -> bool:
        return self.workspace.bot_user_id in channel.members

    def _own(self, person: User, room: Channel, ts: str) -> None:
        if self.workspace.messages.get(room.id, ts).user != person.id:
            raise PermissionError(f"{person.name} cannot change a message they did not post")

    def _view_of(self, user: str, view_id: str) -> tuple[User, View]:
        person = self.workspace.user(user)
        view = self.workspace.views.get(view_id)
        if view.user != person.id:
            raise PermissionError(f"view {view_id} belongs to {view.user}, not {person.id}")
        return person, view

    def _encode_mentions(self, text: str) -> str:
        names = {u.name: u.id for u in self.workspace.directory.users()}

        def encode(match: re.Match[str]) -> str:
            user_id = names.get(match.group(1))
            return f"<@{user_id}>" if user_id else match.group(0)

        return re.sub(r"(?<![<\w])@([a-z0-9._-]+)", encode, text)
