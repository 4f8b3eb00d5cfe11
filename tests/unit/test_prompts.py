"""Prompt templates (Jinja2) render strictly: a missing or unused variable, an unknown include, a cycle — all raise."""

from __future__ import annotations

from pathlib import Path

import pytest

from decklog.bot.settings import project_root
from decklog.core.prompts import PromptError, PromptLibrary


@pytest.fixture
def library(tmp_path: Path) -> PromptLibrary:
    (tmp_path / "partials").mkdir()
    (tmp_path / "greet.md").write_text("Hello {{ name }}.\n{% include 'partials/sig.md' %}", encoding="utf-8")
    (tmp_path / "partials" / "sig.md").write_text("-- {{ team }}", encoding="utf-8")
    (tmp_path / "loop.md").write_text("{% include 'loop.md' %}", encoding="utf-8")
    (tmp_path / "broken.md").write_text("Hello {{ name }", encoding="utf-8")
    (tmp_path / "json.md").write_text('Example: {"a": {"b": 1}} for {{ name }}', encoding="utf-8")
    return PromptLibrary(tmp_path)


def test_renders_variables_and_partials(library: PromptLibrary) -> None:
    assert library.render("greet", name="Ada", team="sre") == "Hello Ada.\n-- sre"
    assert library.variables("greet") == {"name", "team"}


def test_a_missing_variable_raises_naming_it(library: PromptLibrary) -> None:
    with pytest.raises(PromptError, match="needs the variable\\(s\\) team"):
        library.render("greet", name="Ada")


def test_an_unused_variable_raises_naming_it(library: PromptLibrary) -> None:
    with pytest.raises(PromptError, match="does not use the variable\\(s\\) extra"):
        library.render("greet", name="Ada", team="sre", extra="x")


def test_unknown_template_or_partial_raises(library: PromptLibrary, tmp_path: Path) -> None:
    with pytest.raises(PromptError, match="no prompt template 'nope'"):
        library.render("nope")
    (tmp_path / "bad_partial.md").write_text("{% include 'partials/missing.md' %}", encoding="utf-8")
    with pytest.raises(PromptError, match="partials/missing"):
        library.render("bad_partial")


def test_a_partial_cycle_and_a_malformed_placeholder_raise(library: PromptLibrary) -> None:
    with pytest.raises(PromptError, match="cycle"):
        library.render("loop")
    with pytest.raises(PromptError, match="malformed placeholder"):
        library.render("broken", name="Ada")
    with pytest.raises(PromptError, match="cycle"):
        library.variables("loop")


def test_values_are_inserted_verbatim_and_json_braces_in_templates_are_text(library: PromptLibrary) -> None:
    assert library.render("json", name="{{ not a tag }}") == 'Example: {"a": {"b": 1}} for {{ not a tag }}'


def test_a_template_outside_the_root_is_refused(library: PromptLibrary) -> None:
    with pytest.raises(PromptError, match="outside"):
        library.render("../etc/passwd")


def test_the_shipped_prompts_render_with_exactly_their_variables() -> None:
    library = PromptLibrary(project_root() / "prompts")
    assert library.variables("system") == {"actions"}
    assert library.variables("turn") == {
        "trigger",
        "scope",
        "seq_from",
        "seq_to",
        "task",
        "view_name",
        "view_bytes",
        "view",
    }
    assert library.variables("ask") == {"scope", "question", "view_name", "view_bytes", "view"}
    system = library.render("system", actions="- `rollback_deploy` (R2)")
    assert "You never change production yourself" in system and "rollback_deploy" in system
    ask = library.render(
        "ask", scope="incident/x", question="what changed?", view_name="joiner", view_bytes=10, view="{}"
    )
    assert "what changed?" in ask


def test_an_unused_variable_is_detected_through_includes_and_in_branches_not_taken(
    library: PromptLibrary, tmp_path: Path
) -> None:
    (tmp_path / "branch.md").write_text("{% if name %}{{ name }}{% else %}{{ fallback }}{% endif %}", encoding="utf-8")
    assert library.variables("branch") == {"name", "fallback"}
    with pytest.raises(PromptError, match="needs the variable\\(s\\) fallback"):
        library.render("branch", name="Ada")
    assert library.render("branch", name="Ada", fallback="x") == "Ada"
    (tmp_path / "outer.md").write_text("{% include 'greet.md' %}", encoding="utf-8")
    assert library.variables("outer") == {"name", "team"}
    with pytest.raises(PromptError, match="does not use the variable\\(s\\) extra"):
        library.render("outer", name="Ada", team="sre", extra=1)


def test_an_undefined_attribute_raises_and_a_computed_include_is_refused(
    library: PromptLibrary, tmp_path: Path
) -> None:
    (tmp_path / "attr.md").write_text("{{ name.nope }}", encoding="utf-8")
    with pytest.raises(PromptError, match="nope"):
        library.render("attr", name="Ada")
    (tmp_path / "dynamic.md").write_text("{% include which %}", encoding="utf-8")
    with pytest.raises(PromptError, match="computed name"):
        library.render("dynamic", which="greet.md")


def test_the_file_bytes_are_kept_trailing_newline_included(library: PromptLibrary, tmp_path: Path) -> None:
    (tmp_path / "nl.md").write_text("{{ a }}\n\n", encoding="utf-8")
    assert library.render("nl", a="x") == "x\n\n"


def test_the_shipped_prompts_are_package_data() -> None:
    shipped = PromptLibrary.shipped()
    assert shipped.root.resolve() == (project_root() / "prompts").resolve()
    assert shipped.source("system").startswith("{% include")
    assert shipped.variables("system") == {"actions"}
