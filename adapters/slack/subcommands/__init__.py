"""The ``/incident`` subcommands: one table (``table.py``) of rows with their handlers (``handlers.py``)."""

from decklog.adapters.slack.subcommands.handlers import Call, Reply
from decklog.adapters.slack.subcommands.table import TABLE, Subcommand, lookup, parse, usage_blocks, usage_text

__all__ = ["TABLE", "Call", "Reply", "Subcommand", "lookup", "parse", "usage_blocks", "usage_text"]
