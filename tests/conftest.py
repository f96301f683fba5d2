"""Shared fixtures: every test gets its own project root, so tests never see each other's runs."""

import pytest


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A fresh HOPSML_ROOT for this test."""
    path = tmp_path / "root"
    monkeypatch.setenv("HOPSML_ROOT", str(path))
    monkeypatch.setenv("HOPSML_PROJECT", "test")
    monkeypatch.delenv("HOPSML_CONF", raising=False)
    return path
