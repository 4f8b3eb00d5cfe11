"""Report templates: the operator's directory overrides the shipped templates by name, strictly and deterministically.

- an override changes the report (only the overridden section), and re-exports stay byte-identical;
- a broken override (syntax, unknown name, missing attribute) fails the export with a message naming the template,
  and nothing is recorded;
- HTML overrides autoescape; a templates_dir that is not a directory stops start-up.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from decklog.bot.config import load_config
from decklog.bot.runtime import report_templates
from decklog.bot.settings import SettingsError
from decklog.core.reports import ReportTemplateError, ReportTemplates, build_report, render
from decklog.core.reports.export import read_logs, render_report
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.e2e.test_export import DECKLOG, entries_of, scope
from tests.unit.test_reports import GOLDEN, INCIDENT, fixed_ids, store, write_story

__all__ = ["fixed_ids", "scope", "store"]  # fixtures

TIMELINE = """
## Timeline (operator's)

{% for line in report.timeline %}
- #{{ line.seq }} {{ line.text|esc }}
{% endfor %}
"""


def overrides(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "templates"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


async def test_an_override_changes_only_its_section_and_re_renders_identically(
    store: SqliteLogStore, tmp_path: Path
) -> None:
    await write_story(store)
    report = build_report(*await read_logs(store, INCIDENT))
    templates = ReportTemplates(overrides(tmp_path, {"md/timeline.j2": TIMELINE}))
    body = render(report, "md", templates)
    golden = (GOLDEN / "payments-5xx.md").read_text(encoding="utf-8")
    text = body.decode()
    assert "## Timeline (operator's)" in text and "## Timeline\n" not in text
    assert text.split("## Timeline")[0] == golden.split("## Timeline")[0]
    assert text.split("## Decisions")[1] == golden.split("## Decisions")[1]
    assert render(report, "md", ReportTemplates(templates.override_dir)) == body  # a fresh environment: same bytes
    assert render(report, "md", templates) == body
    assert render(report, "html", templates) == (GOLDEN / "payments-5xx.html").read_bytes()  # html untouched


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("md/decisions.j2", "{% for d in report.decisions %}", r"'md/decisions.j2' line 1: .*end of template"),
        ("md/decisions.j2", "{{ no_such_helper(report) }}", r"'md/decisions.j2' refers to unknown name\(s\) no_such"),
        ("md/decisions.j2", "{{ report.no_such_field }}", r"md/decisions.j2' line 1: .*no_such_field"),
        ("md/decisions.j2", "{% include 'md/gone.j2' %}", r"no report template 'md/gone.j2' \(included from"),
        ("report.md.j2", "nothing about the incident", r"'report.md.j2' does not use the variable\(s\) report"),
    ],
)
async def test_a_broken_override_fails_naming_the_template(
    store: SqliteLogStore, tmp_path: Path, name: str, text: str, message: str
) -> None:
    await write_story(store)
    templates = ReportTemplates(overrides(tmp_path, {name: text}))
    with pytest.raises(ReportTemplateError, match=message):
        await render_report(store, INCIDENT, "md", templates=templates)
    assert (await render_report(store, INCIDENT, "html", templates=templates))[0].startswith(b"<!DOCTYPE html>")


async def test_html_overrides_autoescape(store: SqliteLogStore, tmp_path: Path) -> None:
    await write_story(store)
    templates = ReportTemplates(
        overrides(tmp_path, {"html/decisions.j2": '<h2>Decisions</h2><p>{{ report.summary.title ~ " <b>&\'" }}</p>\n'})
    )
    html = (await render_report(store, INCIDENT, "html", templates=templates))[0].decode()
    assert "<h2>Decisions</h2><p>" in html and " &lt;b&gt;&amp;&#x27;</p>" in html


def test_a_templates_dir_that_is_not_a_directory_stops_start_up(tmp_path: Path) -> None:
    config = tmp_path / "decklog.toml"
    config.write_text('[reports]\ntemplates_dir = "nope"\n', encoding="utf-8")
    with pytest.raises(SettingsError, match=r"reports.templates_dir: .*nope.* is not a directory"):
        report_templates(load_config(config))
    (tmp_path / "nope").mkdir()
    assert report_templates(load_config(config)).override_dir == tmp_path / "nope"  # relative to decklog.toml


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DECKLOG_", "SLACK_"))}
    env.update(DECKLOG_DATA_DIR=str(tmp_path / "data"), DECKLOG_ACTOR="oncall")
    env.update(DECKLOG_CONFIG=str(tmp_path / "decklog.toml"))
    return subprocess.run([str(DECKLOG), *args], cwd=str(tmp_path), env=env, capture_output=True, timeout=60)


async def test_the_cli_exports_through_the_operators_templates(tmp_path: Path, scope: str) -> None:
    (tmp_path / "decklog.toml").write_text('[reports]\ntemplates_dir = "templates"\n', encoding="utf-8")
    overrides(tmp_path, {"md/timeline.j2": TIMELINE})
    first = cli(tmp_path, "export", scope, "--format", "md")
    assert first.returncode == 0, first.stderr
    assert b"## Timeline (operator's)" in first.stdout and b"- #2 oncall: 502s from the load balancer" in first.stdout
    second = cli(tmp_path, "export", scope, "--format", "md")
    assert second.returncode == 0 and second.stdout == first.stdout

    overrides(tmp_path, {"md/timeline.j2": "{{ report.timeline.nope }}"})
    target = tmp_path / "broken.md"
    broken = cli(tmp_path, "export", scope, "--format", "md", "--output", str(target))
    assert broken.returncode == 1 and not target.exists()
    assert "md/timeline.j2" in broken.stderr.decode() and "nope" in broken.stderr.decode()
    exported = [e for e in await entries_of(tmp_path / "data", scope) if e.kind == "report_exported"]
    assert [e.payload.destination for e in exported] == ["stdout"]  # the two good exports, recorded once
