"""The sandbox survives a restart: its fake Slack workspace and fake deploy service are kept under the data dir.

decklog's log lives in ``DATA_DIR`` and outlives the process; so must the workspace its messages went to, or
every old incident's thread would be gone after ``make run`` is restarted (replies failing with
``thread_not_found``, header updates with ``message_not_found``, App Home links pointing at nothing). So:

- ``DATA_DIR/sandbox/workspace.json`` holds :meth:`FakeSlackWorkspace.to_dict` — people, channels (created ones
  too), messages, threads, reactions, metadata, files, App Home tabs and modals, the ts clock and the id
  counters (new ids and ts never collide with old ones);
- ``DATA_DIR/sandbox/deploys.json`` holds :meth:`FakeDeployService.to_dict` — the deploy history, applied
  effects and idempotency keys (so a replay or ``/reconcile`` after a restart answers as before).

Both are restored at start-up, before the bot's senders deliver anything, and saved after changes (debounced:
at most every :data:`DEBOUNCE_S` seconds) and on stop; a save is atomic (a temporary file, fsynced, renamed
over the old one). After stop, any late change (a delivery finishing while the server winds down) is written
through at once. A file that cannot be read or does not fit never stops start-up: it is moved aside as
``<name>.broken-<UTC timestamp>`` with a warning naming it, and the sandbox starts fresh.

Secrets are not kept: the signing secret, the bot token and the alert token are made per run and nothing
restored depends on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from decklog.adapters.local.services import FakeDeployService
from decklog.adapters.local.slack import Change, FakeSlackWorkspace

log = logging.getLogger("decklog.sandbox")

__all__ = ["DEBOUNCE_S", "DEPLOYS_FILE", "WORKSPACE_FILE", "SandboxPersistence", "StateFile", "sandbox_dir"]

WORKSPACE_FILE = "workspace.json"
DEPLOYS_FILE = "deploys.json"
DEBOUNCE_S = 0.5


def sandbox_dir(data_dir: Path | str) -> Path:
    """Where the sandbox keeps its state: ``DATA_DIR/sandbox``."""
    return Path(data_dir) / "sandbox"


@dataclass
class StateFile:
    """One JSON state file: read it (moving a bad one aside), write it atomically."""

    path: Path

    def read(self) -> Any | None:
        """The parsed JSON, or ``None`` when there is no file. ``OSError`` / ``ValueError`` when unreadable."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        return json.loads(text)

    def move_aside(self) -> Path | None:
        """Rename the file to ``<name>.broken-<UTC timestamp>`` (keeping it for a post-mortem); None if that failed."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        aside = self.path.with_name(f"{self.path.name}.broken-{stamp}")
        try:
            os.replace(self.path, aside)
        except FileNotFoundError:
            return None
        except OSError:
            log.exception("sandbox: could not move %s aside", self.path)
            return None
        return aside

    def write(self, text: str) -> None:
        """Replace the file's content atomically: a temporary file in the same directory, fsynced, renamed."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with contextlib.suppress(OSError):  # make the rename itself durable (not possible everywhere)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


@dataclass
class _Kept:
    """One thing the sandbox keeps: its file and how to turn it into text."""

    file: StateFile
    dump: Callable[[], Any]
    dirty: bool = False
    failures: int = field(default=0)


class SandboxPersistence:
    """Restores and keeps the sandbox's workspace and deploy service under ``directory`` (``DATA_DIR/sandbox``).

    >>> keeper = SandboxPersistence(sandbox_dir(data_dir))           # doctest: +SKIP
    >>> keeper.restore_workspace(workspace)                          # before any delivery
    >>> keeper.restore_deploys(deploy)                               # before deploy.start()
    >>> keeper.watch(workspace, deploy)                              # debounced saves from now on
    >>> await keeper.close()                                         # on stop: a last save, then write-through
    """

    def __init__(self, directory: Path, *, debounce: float = DEBOUNCE_S) -> None:
        self.directory = directory
        self.workspace_file = StateFile(directory / WORKSPACE_FILE)
        self.deploys_file = StateFile(directory / DEPLOYS_FILE)
        self.debounce = debounce
        self.saves = 0
        """How many files were written (for tests and curiosity)."""
        self._kept: dict[str, _Kept] = {}
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    # -- restoring -----------------------------------------------------------------------------------------------

    def restore_workspace(self, workspace: FakeSlackWorkspace) -> bool:
        """Load ``workspace.json`` into ``workspace`` (in place); False when there was none or it was bad."""
        restored = self._restore(self.workspace_file, workspace.load_dict, "workspace")
        if restored:
            channels = [c for c in workspace.directory.channels() if not c.is_im]
            log.info(
                "sandbox: restored the workspace from %s (%d channels, %d messages)",
                self.workspace_file.path,
                len(channels),
                len(workspace.messages.all()),
            )
        return restored

    def restore_deploys(self, deploy: FakeDeployService) -> bool:
        """Load ``deploys.json`` into ``deploy`` (in place); False when there was none or it was bad."""
        restored = self._restore(self.deploys_file, deploy.load_dict, "deploy service")
        if restored:
            log.info(
                "sandbox: restored the fake deploy service from %s (%d deploys, %d effects)",
                self.deploys_file.path,
                len(deploy.deploys()),
                len(deploy.effects),
            )
        return restored

    @staticmethod
    def _restore(file: StateFile, load: Callable[[Any], None], what: str) -> bool:
        try:
            data = file.read()
            if data is None:
                return False
            load(data)  # all or nothing: a state that does not fit leaves the target as it was
        except Exception as exc:  # whatever is wrong with the file, start-up goes on without it
            aside = file.move_aside()
            log.warning(
                "sandbox: could not restore the %s from %s (%s: %s); %s; starting with a fresh one",
                what,
                file.path,
                exc.__class__.__name__,
                str(exc)[:300],
                f"moved it aside to {aside}" if aside is not None else "it could not be moved aside",
            )
            return False
        return True

    # -- keeping -------------------------------------------------------------------------------------------------

    def watch(self, workspace: FakeSlackWorkspace, deploy: FakeDeployService | None = None) -> None:
        """Save after every change from now on (debounced); call :meth:`close` on stop."""
        self._kept["workspace"] = _Kept(self.workspace_file, workspace.to_dict)
        workspace.add_listener(self._on_workspace_change)
        if deploy is not None:
            self._kept["deploys"] = _Kept(self.deploys_file, deploy.to_dict)
            deploy.on_change = lambda: self._changed("deploys")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sandbox-persistence")

    def _on_workspace_change(self, _change: Change) -> None:
        self._changed("workspace")

    def _changed(self, name: str) -> None:
        kept = self._kept.get(name)
        if kept is None:
            return
        kept.dirty = True
        if self._closed:
            self._save_now(name)  # after stop nothing is left to debounce for: a late change is written at once
        else:
            self._wake.set()

    async def _run(self) -> None:
        while not self._stopping.is_set():
            await self._wake.wait()
            with contextlib.suppress(TimeoutError):  # let a burst of changes settle (cut short by close())
                await asyncio.wait_for(self._stopping.wait(), timeout=self.debounce)
            self._wake.clear()
            await self._save_dirty()

    async def _save_dirty(self) -> None:
        for kept in self._kept.values():
            if not kept.dirty:
                continue
            kept.dirty = False
            try:
                text = self._text(kept)  # on the loop: a consistent picture of the state
                await asyncio.to_thread(kept.file.write, text)
            except Exception as exc:
                kept.dirty = True
                self._failed(kept, exc)
            else:
                self.saves += 1
                kept.failures = 0

    def _save_now(self, name: str) -> None:
        kept = self._kept[name]
        kept.dirty = False
        try:
            kept.file.write(self._text(kept))
        except Exception as exc:
            self._failed(kept, exc)
        else:
            self.saves += 1

    @staticmethod
    def _text(kept: _Kept) -> str:
        return json.dumps(kept.dump(), ensure_ascii=False, separators=(",", ":"))

    @staticmethod
    def _failed(kept: _Kept, exc: Exception) -> None:
        kept.failures += 1
        if kept.failures in (1, 10) or kept.failures % 100 == 0:  # not once per change while a disk is full
            log.warning("sandbox: could not save %s (%s: %s)", kept.file.path, exc.__class__.__name__, exc)

    async def close(self) -> None:
        """Save everything one last time; from then on every change is written through at once."""
        if self._closed:
            return
        self._stopping.set()
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for kept in self._kept.values():
            kept.dirty = True
        await self._save_dirty()
        self._closed = True
        for name, kept in self._kept.items():  # changed while the last save was being written
            if kept.dirty:
                self._save_now(name)
