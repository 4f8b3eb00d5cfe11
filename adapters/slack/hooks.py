"""Old names of :mod:`adapters.slack.ports`, kept until the composition root imports the new module."""

from __future__ import annotations

from adapters.slack.ports import SlackPorts, Where

SlackHooks = SlackPorts

__all__ = ["SlackHooks", "SlackPorts", "Where"]
