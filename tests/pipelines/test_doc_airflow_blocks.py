"""The docs' blocks marked `<!-- block: needs airflow -->` (tests/doc_blocks.py), run under this lane's Airflow with
the rest of their page, in page order; output they show is compared with what ran."""

import pytest

pytest.importorskip("airflow.sdk")   # the lane with the airflow extra installed

from doc_blocks import blocks, pages, run_page

AIRFLOW_PAGES = [p for p in pages() if any(b.needs == "airflow" for b in blocks(p))]


def test_some_page_needs_airflow():
    assert AIRFLOW_PAGES, "no block is marked `needs airflow`: this lane would prove nothing"


@pytest.mark.slow
@pytest.mark.parametrize("page", AIRFLOW_PAGES)
def test_a_page_that_needs_airflow_runs_here(page, airflow_db, tmp_path):
    failures = run_page(page, tmp_path, lane="airflow")
    assert not failures, "\n\n".join(failures)
