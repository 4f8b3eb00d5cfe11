"""``run_demo``: start a server on the sandbox workspace with the story's settings, play the story, print it."""

from __future__ import annotations

import secrets
import sys
import tempfile
from pathlib import Path

from decklog.bot.config import DecklogConfig, load_config
from decklog.bot.demo.story import SCOPE, Demo, StepFailed
from decklog.bot.server import DecklogServer
from decklog.bot.settings import Settings

__all__ = ["demo_config", "demo_settings", "run_demo"]


def demo_settings(settings: Settings, data_dir: Path) -> Settings:
    """The operator's settings, in the local sandbox, with the story's timing and a fresh alert token."""
    values = settings.model_dump()
    values.update(
        data_dir=data_dir,
        host="127.0.0.1",
        port=0,
        slack_bot_token=None,
        slack_signing_secret=None,
        slack_app_token=None,
        slack_api_url=None,
        anthropic_api_key=None,
        deploy_api_url=None,
        statuspage_api_url=None,
        alert_token=secrets.token_hex(16),
        first_turn_delay=0.3,
        turn_debounce=0.3,
    )
    return Settings.model_validate(values)


def demo_config(settings: Settings) -> DecklogConfig:
    data = load_config(settings.resolved_config_path).model_dump()
    data["slack"].update(pace_per_channel_s=0.05, header_update_interval_s=0.2)
    return DecklogConfig.model_validate(data)


async def run_demo(settings: Settings, *, data_dir: Path | None = None) -> int:
    directory = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="decklog-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    if any((directory / "scopes").glob("incident~payments-5xx*.db")):
        print(f"decklog: error: {directory} already holds a demo; give a new --data-dir", file=sys.stderr)
        return 1
    demo_env = demo_settings(settings, directory)
    server = DecklogServer(demo_env, config=demo_config(demo_env))
    await server.start()
    demo = Demo(server, print)
    ok = True
    try:
        await demo.run()
        path, digest = await demo.report_file(directory / "reports")
    except StepFailed as exc:
        ok = False
        print(
            f"\ndecklog demo: FAILED after {len(demo.steps)} steps ({', '.join(demo.steps) or 'none'}): {exc}",
            file=sys.stderr,
        )
    finally:
        conversation = demo.conversation()
        await server.stop()
    print("\n#alerts, as a person reads it:\n")
    print("\n".join(conversation))
    if not ok:
        print(f"\ndata directory (kept): {directory}")
        return 1
    print(f"\nevery step happened: {', '.join(demo.steps)}")
    print(f"report: {path} (sha256 {digest})")
    print(f"data directory (kept): {directory}")
    print(f"try: DECKLOG_DATA_DIR={directory} decklog timeline {SCOPE}")
    return 0
