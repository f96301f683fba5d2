"""`hopsml ui`: a local, read-only web view of a project root (experiments, searches, datasets,
the feature store, models), served by Flask. `create_app(settings)` builds the application; `serve` runs it.

Importing this package does not import Flask; `create_app` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flask import Flask

    from hopsml import config
    from hopsml.ui.hosts import HostPolicy

__all__ = ["create_app"]


def create_app(settings: config.Settings, hosts: HostPolicy | None = None) -> Flask:
    """The Flask application over `settings.root`, answering the Host names `hosts` allows."""
    from hopsml.ui.app import create_app as _create

    return _create(settings, hosts)
