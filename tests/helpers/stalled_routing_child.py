"""``decklog serve`` that stores and acknowledges alert notifications but never routes them: a process that is
killed between its 202s and their routing, at whatever moment the test picks.

    STALL_MARKER=/tmp/x python -m tests.helpers.stalled_routing_child serve

The stall is installed from here (test code) on ``AlertRouter.receive_many``: the first call writes
``STALL_MARKER`` and waits for ever. Production code has no switch for this.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from decklog.core.alerts.router import AlertRouter


def _install(marker: Path) -> None:
    async def stalled(self: AlertRouter, notifications: Sequence[Any]) -> Any:
        marker.write_text(f"{len(notifications)}\n")
        await asyncio.Event().wait()

    AlertRouter.receive_many = stalled  # type: ignore[method-assign,assignment]


def main() -> int:
    _install(Path(os.environ["STALL_MARKER"]))
    from decklog.bot.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
