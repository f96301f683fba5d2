"""Every code block of README.md and docs/ runs here, or in the lane its marker names, or is listed as not run with
why (tests/doc_blocks.py says how blocks are marked); output a page shows is compared with what its block printed."""

import pytest
from doc_blocks import NEEDS, blocks, check_markers, pages, run_page

PAGES = pages()


def _starts_spark(page: str) -> bool:
    return any(b.lang in {"python", "bash", "console"} and not b.marker and
               any(word in b.code for word in ("experiment.", "hopsml quickstart", "hopsml prep", "spark"))
               for b in blocks(page))


@pytest.mark.parametrize("page", PAGES)
def test_the_markers_of_a_page_are_known_and_say_why(page):
    assert check_markers(blocks(page)) == []


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if _starts_spark(p) else p for p in PAGES])
def test_the_blocks_of_a_page_run_and_print_what_it_shows(page, tmp_path):
    failures = run_page(page, tmp_path)
    assert not failures, "\n\n".join(failures)


def test_no_block_is_left_out_silently():
    """A fenced block is code that runs, output compared, or marked; its language alone never excuses it."""
    unmarked_text = [b.where for p in PAGES for b in blocks(p)
                     if not b.marker and b.lang not in {"python", "bash", "sh", "shell", "console", "text", "output"}]
    assert unmarked_text == [], "give these blocks a language (text for a listing) or a marker"
    lanes = {b.needs for p in PAGES for b in blocks(p)} - {"", "not run"}
    assert lanes <= NEEDS
