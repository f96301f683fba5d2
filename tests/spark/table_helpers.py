"""What the table tests share: a project of their own per module, and the paths of a prepared dataset."""

import os

from hopsml import config


def project_settings(tmp_path_factory, name):
    """Settings for a project of its own under a fresh folder (a module's tests share it)."""
    base = tmp_path_factory.mktemp(name)
    return config.load(environ={}, root=str(base / "root"), project="test", master="local[4]")


def dataset_folder(settings, name, *parts):
    return os.path.join(settings.root, "Projects", "test", "Datasets", name, *parts)
