"""MkDocs hook: the settings page's table is made from hopsml's own field table when the docs are built."""

from typing import Any

from hopsml import config

MARKER = "<!-- settings-table -->"


def on_page_markdown(markdown: str, **_: Any) -> str:
    """The page's Markdown with the settings table in place of its marker (MkDocs passes page, config, files)."""
    return markdown.replace(MARKER, config.settings_markdown())
