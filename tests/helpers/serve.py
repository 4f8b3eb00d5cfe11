"""``decklog serve`` as a subprocess against a fake Slack, for the crash tests and the benches.

>>> served = await asyncio.to_thread(start_serve, data_dir, fake.base_url, socket=False)   # doctest: +SKIP
>>> fake.use_http(served.events_url, SIGNING_SECRET)
>>> served.kill()          # SIGKILL, as a crash

The server gets a config file with Slack pacing off (as ``tests.conftest.test_config``), agents that never take
a turn during the run, and its stderr in ``<data_dir>/../serve-<pid>.log``. ``module`` lets a bench run the
server under its own launcher (a profiler) with the same environment; production code has no switch for it.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
BOT_TOKEN, APP_TOKEN, SIGNING_SECRET, ALERT_TOKEN = "xoxb-crash", "xapp-crash", "crash-secret", "crash-alert-token"
ALICE, BOB, GENERAL = "U0ALICE", "U0BOB", "C0GENERAL"


def test_config_file(directory: Path) -> Path:
    """The shipped example config with no Slack pacing (written once per directory)."""
    path = directory / "decklog.crash.toml"
    if not path.exists():
        text = (ROOT / "bot" / "decklog.example.toml").read_text()
        text = re.sub(r"(?m)^pace_per_channel_s = .*$", "pace_per_channel_s = 0.0", text)
        text = re.sub(r"(?m)^header_update_interval_s = .*$", "header_update_interval_s = 0.0", text)
        path.write_text(text)
    return path


def serve_env(data_dir: Path, api_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DECKLOG_", "SLACK_", "ANTHROPIC_"))}
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "DECKLOG_DATA_DIR": str(data_dir),
            "DECKLOG_CONFIG": str(test_config_file(data_dir.parent)),
            "DECKLOG_PORT": "0",
            "DECKLOG_HOST": "127.0.0.1",
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "DECKLOG_SLACK_API_URL": api_url,
            "DECKLOG_ALERTS_CHANNEL": GENERAL,
            "DECKLOG_ALERT_TOKEN": ALERT_TOKEN,
            "DECKLOG_FIRST_TURN_DELAY": "3600",
            "DECKLOG_TURN_DEBOUNCE": "3600",
            "DECKLOG_LOG_LEVEL": "WARNING",
        }
    )
    env.update(extra)
    return env


@dataclass
class Served:
    proc: subprocess.Popen[str]
    url: str
    started_at: float  # time.monotonic() when the process was spawned
    ready_at: float  # ... and when it printed "serving on"
    log: Path
    _drain: threading.Thread | None = field(default=None, repr=False)
    output: list[str] = field(default_factory=list)  # its stdout lines, the "serving on" one first

    @property
    def events_url(self) -> str:
        return f"{self.url}/slack/events"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL: a crash. Nothing runs in the server after this."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def dump(self, timeout: float = 10.0) -> str:
        """``kill -USR1``: the server writes every task's and thread's stack to its log (bot/diagnostics.py);
        returns that dump (empty if it did not come in ``timeout``)."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            starts = [m.start() for m in re.finditer(r"decklog: task dump: \d+ tasks", text)]
            if starts and "decklog: task dump: end" in text[starts[-1] :]:
                return text[starts[-1] :]
            time.sleep(0.05)
        return ""

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait (SIGKILL if it does not end in ``timeout``); the exit code."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def start_serve(
    data_dir: Path,
    api_url: str,
    *,
    socket: bool = False,
    module: str = "decklog.bot.cli",
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
    nofile: int | None = None,
) -> Served:
    """Spawns the server and waits (blocking: call it in a thread) for its "serving on URL" line. ``nofile``: the
    server's file limit (``RLIMIT_NOFILE``, soft and hard)."""
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    extra = {"SLACK_APP_TOKEN": APP_TOKEN} if socket else {}
    argv = [sys.executable, "-m", module, "serve", *(["--socket-mode"] if socket else [])]
    started = time.monotonic()
    log = data_dir.parent / f"serve-{time.time_ns()}.log"
    proc = subprocess.Popen(
        argv,
        env={**serve_env(data_dir, api_url, **extra), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        cwd=str(ROOT),
        preexec_fn=None if nofile is None else lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)),
    )
    assert proc.stdout is not None
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        line = proc.stdout.readline()
    finally:
        timer.cancel()
    match = re.search(r"serving on (http://\S+)", line)
    if not match:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"decklog serve did not start: {line!r}\n{log.read_text(errors='replace')[-3000:]}")
    # keep reading stdout so that a chatty server never blocks on a full pipe
    output = [line.rstrip("\n")]
    drain = threading.Thread(target=lambda: output.extend(x.rstrip("\n") for x in proc.stdout or ()), daemon=True)
    drain.start()
    return Served(proc, match.group(1), started, time.monotonic(), log, drain, output)
