"""What the table tests share: a project of their own per module, and the paths of a prepared dataset."""

import os

from hopsml import config


def project_settings(tmp_path_factory, name, small_table_rows=0):
    """Settings for a project of its own under a fresh folder (a module's tests share it). Every table goes to
    the Spark job unless ``small_table_rows`` says otherwise (test_data_tables_engines compares the two)."""
    base = tmp_path_factory.mktemp(name)
    return config.load(environ={}, root=str(base / "root"), project="test", master="local[4]",
                       small_table_rows=small_table_rows)


def dataset_folder(settings, name, *parts):
    return os.path.join(settings.root, "Projects", "test", "Datasets", name, *parts)
