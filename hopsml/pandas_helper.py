"""pandas' readers and writers on project paths, with the names of hops' `pandas_helper`.

Each takes a path in any form `hopsml.hdfs` accepts and passes every other argument to pandas
(``read_csv(path, sep=";")``, ``write_csv(path, frame, index=False)``). Writers replace the file
whole: it is written aside and renamed into place, so a failed write leaves the old one. pandas'
own defaults hold, as in hops: ``write_csv`` writes the index unless ``index=False`` is given.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hopsml import hdfs
from hopsml.hdfs import InvalidPathError

if TYPE_CHECKING:
    import pandas as pd


def _read(reader: Callable[..., Any], hdfs_filename: str, kwds: dict[str, Any]) -> Any:
    if hdfs.stat(hdfs_filename).kind == "directory":  # stat also says hops' way that a path is missing
        raise InvalidPathError(f"{hdfs_filename!r} is a folder; pandas reads files (hdfs.ls() lists it)")
    with hdfs.open_file(hdfs_filename, mode="rb") as stream:
        return reader(stream, **kwds)


def read_csv(hdfs_filename: str, **kwds: object) -> Any:
    """pandas.read_csv of a project file."""
    import pandas as pd

    return _read(pd.read_csv, hdfs_filename, kwds)


def read_parquet(hdfs_filename: str, **kwds: object) -> Any:
    """pandas.read_parquet of one Parquet file (a dataset folder: hopsml.data.reader or Spark)."""
    import pandas as pd

    return _read(pd.read_parquet, hdfs_filename, kwds)


def read_json(hdfs_filename: str, **kwds: object) -> Any:
    """pandas.read_json of a project file (``lines=True`` for JSON Lines)."""
    import pandas as pd

    return _read(pd.read_json, hdfs_filename, kwds)


def read_excel(hdfs_filename: str, **kwds: object) -> Any:
    """pandas.read_excel of a project file (needs openpyxl for .xlsx, as pandas does)."""
    import pandas as pd

    return _read(pd.read_excel, hdfs_filename, kwds)


def _write(hdfs_filename: str, text: bool, write: Callable[[Any], Any]) -> None:
    buffer: io.StringIO | io.BytesIO = io.StringIO() if text else io.BytesIO()
    write(buffer)  # whole before the target is touched: a frame that fails to serialise changes nothing
    data = buffer.getvalue()
    hdfs.dump(data.encode("utf-8") if isinstance(data, str) else data, hdfs_filename)


def write_csv(hdfs_filename: str, dataframe: pd.DataFrame, **kwds: object) -> None:
    """DataFrame.to_csv into a project file, replacing it."""
    _write(hdfs_filename, True, lambda buffer: dataframe.to_csv(buffer, **kwds))


def write_parquet(hdfs_filename: str, dataframe: pd.DataFrame, **kwds: object) -> None:
    """DataFrame.to_parquet into a project file, replacing it."""
    _write(hdfs_filename, False, lambda buffer: dataframe.to_parquet(buffer, **kwds))


def write_json(hdfs_filename: str, dataframe: pd.DataFrame, **kwds: object) -> None:
    """DataFrame.to_json into a project file, replacing it."""
    _write(hdfs_filename, True, lambda buffer: dataframe.to_json(buffer, **kwds))


__all__ = ["read_csv", "read_excel", "read_json", "read_parquet", "write_csv", "write_json", "write_parquet"]
