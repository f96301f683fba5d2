"""The generated reference stays true: docs/settings.md, docs/cli.md and docs/reference.md hold what
docs/reference_pages.py makes from the code now, every command and flag of `hopsml` says what it does, and every
public function of the faces has a docstring."""

import argparse
import importlib.util
from pathlib import Path

import pytest

from hopsml import cli, config

ROOT = Path(__file__).parents[2]


def _pages():
    spec = importlib.util.spec_from_file_location("reference_pages", ROOT / "docs" / "reference_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pages():
    return _pages()


@pytest.mark.parametrize("page", ["settings.md", "cli.md", "reference.md"])
def test_the_checked_in_page_is_what_the_code_generates(pages, page):
    checked_in = (ROOT / "docs" / page).read_text(encoding="utf-8")
    assert pages.generated(page) == checked_in, f"docs/{page} is stale: run {pages.COMMAND} and commit it"


def test_the_settings_page_holds_the_table_itself(pages):
    text = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    part = text.split(pages.begin("settings"), 1)[1].split(pages.end("settings"), 1)[0]
    assert part.strip() == config.settings_markdown()
    assert "<!-- settings-table -->" not in text   # no build-time placeholder left


def test_a_changed_generated_part_is_replaced_and_the_rest_kept(pages):
    page = f"intro\n{pages.begin('cli')}\nold table\n{pages.end('cli')}\noutro\n"
    assert pages.replace(page, "cli", "new table") == (
        f"intro\n{pages.begin('cli')}\n\nnew table\n\n{pages.end('cli')}\noutro\n")
    with pytest.raises(ValueError, match="begin generated cli"):
        pages.replace("a page without markers", "cli", "table")


def test_every_command_and_flag_is_on_the_cli_page(pages):
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    found = list(pages.commands())
    assert len(found) > 40   # hopsml, its commands and their subcommands
    for path, parser, _ in found:
        assert f"`{' '.join(path)}`" in text
        for action in pages.arguments(parser):
            assert all(flag in text for flag in action.option_strings)
    assert "`hopsml prep tabular`" in text and "`--test-fraction TEST_FRACTION` | `0.2` |" in text


def test_every_command_and_flag_has_a_help_text(pages):
    missing = set(pages.missing_help())
    assert not missing, f"give these a help= text: {sorted(missing)}"


def test_a_flag_without_help_is_found(pages, monkeypatch):
    def parser():
        top = argparse.ArgumentParser(prog="hopsml", description="what hopsml is")
        sub = top.add_subparsers(dest="command").add_parser("run", help="run it")
        sub.add_argument("--fast", action="store_true")
        sub.add_argument("--quiet", action="store_true", help="say less")
        return top

    monkeypatch.setattr(pages.cli, "_parser", parser)
    assert pages.missing_help() == ["hopsml run --fast"]


def test_hopsml_help_says_what_hopsml_is(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    description = capsys.readouterr().out.split("\n\n")[1]
    assert "Spark-integrated ML pipelines" in " ".join(description.split())


def test_every_public_function_of_the_faces_has_a_docstring(pages):
    missing = set(pages.missing_docstrings())
    assert not missing, f"give these a docstring: {sorted(missing)}"


def test_a_function_without_a_docstring_is_found_and_a_made_up_dataclass_one_does_not_count(pages, monkeypatch):
    from dataclasses import dataclass

    import hopsml.checkpoint

    @dataclass
    class Plain:
        x: int

    def undocumented(step: int) -> None:
        pass

    monkeypatch.setattr(hopsml.checkpoint, "undocumented", undocumented, raising=False)
    monkeypatch.setattr(hopsml.checkpoint, "Plain", Plain, raising=False)
    undocumented.__module__ = Plain.__module__ = "hopsml.checkpoint"
    monkeypatch.setattr(pages, "FACES", [("face", "text", ["hopsml.checkpoint"], [])])
    assert set(pages.missing_docstrings()) == {"hopsml.checkpoint.undocumented", "hopsml.checkpoint.Plain"}


def test_a_signature_shows_annotations_as_written_and_no_memory_address(pages):
    marker = object()

    def verb(a: "list[str] | None" = None, *, b: object = marker) -> "tuple[str, int]":
        """What it does."""
        raise NotImplementedError

    assert pages.signature(verb, "verb") == "verb(a: list[str] | None = None, *, b: object = <object object>) " \
                                            "-> tuple[str, int]"
