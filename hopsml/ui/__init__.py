"""`hopsml ui`: a local, read-only web view of a project root (experiments, searches, datasets,
models), served by Flask. `create_app(settings)` builds the application; `serve` runs it.

Importing this package does not import Flask; `create_app` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flask import Flask

    from hopsml import config

__all__ = ["create_app"]


def create_app(settings: config.Settings) -> Flask:
    """The Flask application over `settings.root`."""
    from hopsml.ui.app import create_app as _create

    return _create(settings)
