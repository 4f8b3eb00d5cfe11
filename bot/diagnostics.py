"""``kill -USR1 <pid>`` on a running ``decklog serve``: what it is doing, on stderr (the server log).

Every asyncio task with its name and the frames it is suspended in, then every thread's Python stack
(``faulthandler``). For a server that looks stuck (an outbox row that does not move, a shutdown that does not end):
the dump names the await each task waits on, without stopping or slowing the server.
"""

from __future__ import annotations

import asyncio
import faulthandler
import signal
import sys

MARK = "decklog: task dump"


def dump_tasks() -> None:
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    print(f"{MARK}: {len(tasks)} tasks", file=sys.stderr)
    for task in tasks:
        print(f"--- task {task.get_name()}", file=sys.stderr)
        task.print_stack(limit=12, file=sys.stderr)
    print(f"{MARK}: threads", file=sys.stderr, flush=True)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    print(f"{MARK}: end", file=sys.stderr, flush=True)


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Dump on SIGUSR1 (where the platform has it)."""
    usr1 = getattr(signal, "SIGUSR1", None)
    if usr1 is not None:
        loop.add_signal_handler(usr1, dump_tasks)
