"""The features ``decklog serve`` wires in, in order. Each is ``async def feature(server) -> None`` and may add
routes (``server.web.router``), senders (``server.runtime.dispatcher.register``), Slack hooks
(``server.hooks``) and stop callbacks (``server.on_stop``). Adding an integration = one line here."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.server import Feature


def all_features() -> list[Feature]:
    return []
