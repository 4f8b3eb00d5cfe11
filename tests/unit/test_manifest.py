"""manifest.yml and the code agree: listeners, events and their scopes, and the Web API methods we call."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from decklog.adapters.slack import ids
from decklog.adapters.slack.deps import SlackDeps
from decklog.adapters.slack.listeners import register_all

ROOT = Path(__file__).resolve().parents[2]


def manifest() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "manifest.yml").read_text())


class RecordingApp:
    """Stands in for AsyncApp during registration and records what each listener is registered for."""

    def __init__(self) -> None:
        self.commands: set[str] = set()
        self.events: set[str] = set()
        self.actions: set[str] = set()
        self.views: set[str] = set()
        self.shortcuts: set[str] = set()
        self.error_handlers = 0

    def _record(self, bucket: set[str], key: Any) -> Callable[[Any], Any]:
        bucket.add(str(key))
        return lambda *fn, **lazy: fn[0] if fn else None  # decorator, or Bolt's (ack=…, lazy=[…]) form

    def command(self, name: Any, middleware: Any = None) -> Callable[[Any], Any]:  # Bolt's listener middleware
        return self._record(self.commands, name)

    def event(self, name: Any, middleware: Any = None) -> Callable[[Any], Any]:  # Bolt's listener middleware
        return self._record(self.events, name)

    def action(self, name: Any, middleware: Any = None) -> Callable[[Any], Any]:  # Bolt's listener middleware
        return self._record(self.actions, name)

    def view(self, name: Any, middleware: Any = None) -> Callable[[Any], Any]:  # Bolt's listener middleware
        return self._record(self.views, name)

    def shortcut(self, name: Any, middleware: Any = None) -> Callable[[Any], Any]:  # Bolt's listener middleware
        return self._record(self.shortcuts, name)

    def error(self, fn: Any) -> Any:
        self.error_handlers += 1
        return fn


def registered() -> RecordingApp:
    app = RecordingApp()
    deps = SlackDeps(None, None, None, None, None, {})  # type: ignore[arg-type]  # registration only
    register_all(app, deps)  # type: ignore[arg-type]
    return app


def test_every_manifest_command_has_a_listener_and_vice_versa() -> None:
    commands = {c["command"] for c in manifest()["features"]["slash_commands"]}
    assert commands == registered().commands == {ids.COMMAND}


def test_every_manifest_event_has_a_listener_and_vice_versa() -> None:
    events = set(manifest()["settings"]["event_subscriptions"]["bot_events"])
    listened = registered().events
    as_bolt = {e.split(".", 1)[0] for e in events}  # message.channels / message.groups → message
    assert as_bolt == listened
    assert set(ids.EVENT_SCOPES) == events


def test_every_action_id_and_view_has_a_listener_and_vice_versa() -> None:
    app = registered()
    assert app.actions == {a.value for a in ids.Action}
    assert app.views == {v.value for v in ids.View}
    assert app.error_handlers == 1


def test_every_manifest_shortcut_has_a_listener_and_vice_versa() -> None:
    shortcuts = manifest()["features"]["shortcuts"]
    assert {s["callback_id"] for s in shortcuts} == registered().shortcuts == {s.value for s in ids.Shortcut}
    record = next(s for s in shortcuts if s["callback_id"] == ids.Shortcut.RECORD)
    assert record["type"] == "message" and record["name"] == "Record in incident…"


def test_every_event_has_its_scope_and_every_scope_is_needed() -> None:
    scopes = set(manifest()["oauth_config"]["scopes"]["bot"])
    for event, scope in ids.EVENT_SCOPES.items():
        assert scope is None or scope in scopes, f"{event} needs {scope}"
    method_scopes = {s for v in ids.METHOD_SCOPES.values() if v for s in ((v,) if isinstance(v, str) else v)}
    needed = {s for s in ids.EVENT_SCOPES.values() if s} | method_scopes
    needed.add(ids.COMMAND_SCOPE)
    assert scopes == needed, f"missing: {needed - scopes}; unneeded: {scopes - needed}"


def test_every_web_api_method_the_code_calls_is_declared_with_its_scope() -> None:
    called: set[str] = set()
    for path in [*ROOT.glob("adapters/**/*.py"), *ROOT.glob("bot/**/*.py")]:
        if "local" in path.parts:  # the local world (simulator, sandbox) is not decklog talking to Slack
            continue
        for method in re.findall(r"client\.([a-z]+)_([A-Za-z0-9_]+)\(", path.read_text()):
            called.add(f"{method[0]}.{method[1]}")
    unknown = called - set(ids.METHOD_SCOPES)
    assert not unknown, f"calls without a declared scope: {sorted(unknown)}"


def test_interactivity_and_app_home_are_on() -> None:
    m = manifest()
    assert m["settings"]["interactivity"]["is_enabled"] is True
    assert m["features"]["app_home"]["home_tab_enabled"] is True
    urls = {m["settings"]["interactivity"]["request_url"], m["settings"]["event_subscriptions"]["request_url"]}
    urls |= {c["url"] for c in m["features"]["slash_commands"]}
    assert all(u.endswith("/slack/events") for u in urls)
