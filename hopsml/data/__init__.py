"""Data pipelines: images and tables into Parquet (petastorm) and TFRecord shards with Spark, and
rank-side readers of those shards.

The package root imports nothing heavy: ``from hopsml.data import reader`` works without pyspark;
the Spark-side functions are imported where they are used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["prepare_images", "prepare_table", "reader", "show_stats"]


def __getattr__(name: str) -> Any:  # lazy, so that importing hopsml.data never imports pyspark
    if name == "prepare_images":
        from hopsml.data.images import prepare_images

        return prepare_images
    if name == "prepare_table":
        from hopsml.data.tables import prepare_table

        return prepare_table
    if name == "show_stats":
        from hopsml.data.stats import show

        return show
    raise AttributeError(f"module 'hopsml.data' has no attribute {name!r}")


def reader(dataset: str, *args: Any, **kwargs: Any) -> Any:
    """This rank's share of a dataset as numpy batches; see :func:`hopsml.data.readers.reader`."""
    from hopsml.data.readers import reader as _reader

    return _reader(dataset, *args, **kwargs)
