"""docs/architecture.md stays true: every module says what it holds (the page's module table is made from those
docstrings when the site is built), and every module over 500 lines has its reason in the page."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
PAGE = ROOT / "docs" / "architecture.md"


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _reasons() -> dict[str, str]:
    """The page's table of long modules: module -> its reason."""
    section = PAGE.read_text().split("## Modules over 500 lines, and why", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| `([^`]+)` \| (.+) \|$", section, re.M)}


def test_every_module_has_a_docstring_for_the_page():
    assert [path for path, _, first in _hooks().modules() if not first] == []


def test_every_long_module_has_its_reason_and_every_reason_a_long_module():
    hooks = _hooks()
    long = {path for path, lines, _ in hooks.modules() if lines > hooks.LONG}
    reasons = _reasons()
    assert sorted(long - set(reasons)) == [], "give these modules a reason in docs/architecture.md, or split them"
    assert sorted(set(reasons) - long) == [], "these are no longer over 500 lines (or gone): take them out"
    assert all(len(why) > 20 for why in reasons.values())


def test_the_built_page_lists_every_module_with_its_length():
    hooks = _hooks()
    built = hooks.on_page_markdown(PAGE.read_text())
    assert hooks.MODULES not in built
    for path, lines, _ in hooks.modules():
        assert f"| `{path}` | {lines} |" in built
    assert "| `featurestore/view.py` |" in built and "| `cli.py` |" in built


def test_a_long_module_without_a_reason_is_found(tmp_path, monkeypatch):
    hooks = _hooks()
    package = tmp_path / "hopsml"
    package.mkdir()
    (package / "big.py").write_text('"""A big one."""\n' + "x = 1\n" * (hooks.LONG + 1))
    monkeypatch.setattr(hooks, "PACKAGE", package)
    assert [(path, lines > hooks.LONG) for path, lines, _ in hooks.modules()] == [("big.py", True)]
