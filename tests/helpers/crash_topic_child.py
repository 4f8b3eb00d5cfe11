"""``decklog serve`` whose sender for one outbox topic ends the process right before its first delivery.

    CRASH_TOPIC=slack CRASH_MARKER=/tmp/x python -m tests.helpers.crash_topic_child serve [--socket-mode]

The wrap is installed from here (test code) on ``Dispatcher.register``: the sender named ``CRASH_TOPIC`` writes
``CRASH_MARKER`` and calls ``os._exit(CRASH_EXIT)`` the first time it is asked to deliver a batch, so the entries
are committed and their delivery to that topic has not happened. Production code has no switch for this.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from decklog.core.outbox.dispatcher import Dispatcher

CRASH_EXIT = 86


def _install(topic: str, marker: Path) -> None:
    register = Dispatcher.register

    def crashing_register(self: Dispatcher, sender: Any, *, first: bool = False) -> None:
        if getattr(sender, "name", None) == topic:
            deliver = sender.deliver

            async def deliver_or_die(scope: str, entries: Sequence[Any]) -> None:
                seqs = ",".join(str(e.seq) for e in entries)
                marker.write_text(f"{topic} {scope} {seqs}\n")
                os._exit(CRASH_EXIT)
                await deliver(scope, entries)  # pragma: no cover - never reached

            sender.deliver = deliver_or_die
        register(self, sender, first=first)

    Dispatcher.register = crashing_register  # type: ignore[method-assign]


def main() -> int:
    _install(os.environ["CRASH_TOPIC"], Path(os.environ["CRASH_MARKER"]))
    from decklog.bot.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
