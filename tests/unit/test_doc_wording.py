"""No page of the docs promises what exists already: "to come", "next part", "not yet" about a thing hopsml has."""

import re

from doc_blocks import REPO, pages

PROMISES = re.compile(r"\b(to come|next part|not yet|coming soon|will be added)\b", re.IGNORECASE)
# Lines where the words are true, each with why.
ALLOWED = [
    "written, not yet run on a GPU",                      # training.md: the code path exists; no GPU host ran it
    'keeps "to come" and "not yet" out of the pages',   # development.md, naming this test
]


def test_no_page_says_to_come_or_not_yet_about_what_exists():
    found = []
    for page in pages():
        for number, line in enumerate((REPO / page).read_text().split("\n"), 1):
            if PROMISES.search(line) and not any(allowed in line for allowed in ALLOWED):
                found.append(f"{page}:{number}: {line.strip()}")
    assert found == []


def test_the_rule_finds_a_promise():
    assert PROMISES.search("Canary rollouts are not yet supported") and PROMISES.search("More to come.")
