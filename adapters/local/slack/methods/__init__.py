"""The fake's Web API methods, one module per family; :func:`method_table` maps a name to its handler."""

from __future__ import annotations

from . import chat, conversations, files, identity, reactions, views
from .context import CallContext, Handler

__all__ = ["CallContext", "Handler", "method_table"]


def method_table() -> dict[str, Handler]:
    table: dict[str, Handler] = {}
    for family in (identity, chat, conversations, reactions, views, files):
        table.update(family.handlers())
    return table
