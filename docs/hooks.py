"""MkDocs hook: the architecture page's list of modules (from each module's docstring and length) is made from the
code when the docs are built, so it cannot drift from it. The settings table, the command line and the Python API
are generated into their pages and checked in instead (docs/reference_pages.py), so the repository shows them."""

import ast
from pathlib import Path
from typing import Any

MODULES = "<!-- modules-table -->"
PACKAGE = Path(__file__).resolve().parents[1] / "hopsml"
LONG = 500   # lines: a module longer than this needs its reason in the architecture page


def modules() -> list[tuple[str, int, str]]:
    """(path under hopsml/, lines, the docstring's first sentence) of every module of the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "conf" in path.relative_to(PACKAGE).parts:
            continue
        source = path.read_text(encoding="utf-8")
        doc = ast.get_docstring(ast.parse(source)) or ""
        first = " ".join(doc.split("\n\n", 1)[0].split())
        found.append((path.relative_to(PACKAGE).as_posix(), len(source.splitlines()), first))
    return found


def modules_markdown() -> str:
    """The architecture page's table of modules: each one's room, lines and what its docstring says it holds."""
    rows = ["| module | lines | what it holds |", "| --- | ---: | --- |"]
    for path, lines, first in modules():
        text = first.replace("|", "\\|") or "(no docstring)"
        rows.append(f"| `{path}` | {lines} | {text} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """The page's Markdown with the generated parts in place of their markers (MkDocs passes page, config,
    files)."""
    if MODULES in markdown:
        markdown = markdown.replace(MODULES, modules_markdown())
    return markdown
