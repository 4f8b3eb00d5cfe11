"""``decklog oncall import --from pagerduty|opsgenie|grafana-oncall FILE…``: prints the ``[oncall]`` configuration
to paste into decklog.toml, preceded by what could not be mapped, as TOML comments (core/oncall/imports.py maps)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import tomli_w

from decklog.bot.cli.parser import UsageError
from decklog.bot.settings import Settings
from decklog.core.oncall.imports import IMPORTERS, Imported


def render(imported: Imported, vendor: str) -> str:
    """The text ``decklog oncall import`` prints: comments, then ``[oncall]`` TOML."""
    notes = imported.notes()
    lines = [f"# decklog.toml [oncall], imported from {vendor}."]
    if notes:
        lines.append(f"# Not mapped ({len(notes)}):")
        lines += [f"#   - {n}" for n in notes]
    else:
        lines.append("# Everything was mapped.")
    body = tomli_w.dumps({"oncall": imported.oncall()})
    return "\n".join(lines) + "\n\n" + body


def merge(parts: list[Imported]) -> Imported:
    out = Imported()
    for p in parts:
        out.schedules += p.schedules
        out.policies += p.policies
        out.routes += p.routes
        out.unmapped += p.unmapped
        for uid, name in p.users.items():
            out.users.setdefault(uid, name)
    return out


async def cmd_oncall(_settings: Settings, args: argparse.Namespace) -> int:
    importer = IMPORTERS[args.vendor]
    parts = []
    for path in args.files:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UsageError(f"no such file: {path}") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UsageError(f"{path} is not JSON: {exc}") from None
        parts.append(importer(data))
    print(render(merge(parts), args.vendor), end="")
    return 0
