"""Fixtures for tests that run several real rank processes (see rank_processes.py)."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable

import pytest
from rank_processes import _START_METHOD, Outcome, run_ranks


@pytest.fixture(scope="session")
def ranks() -> Callable[..., dict[int, Outcome]]:
    """The `run_ranks` helper, as a fixture."""
    ctx = mp.get_context(_START_METHOD)
    if _START_METHOD == "forkserver":
        ctx.set_forkserver_preload(["numpy", "hopsml.collective"])
    return run_ranks
