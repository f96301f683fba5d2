"""hsml.schema.Schema: what a model takes or returns, described from an example (a DataFrame's columns, or an
array's type and shape), as model.json's `model_schema` keeps it."""

from __future__ import annotations

from typing import Any


class Schema:
    """The schema of `object`: columnar for a pandas/Polars DataFrame, a Series or a list of column dicts;
    a tensor schema (type and shape) for an array or a list of numbers."""

    def __init__(self, object: Any = None, **_: object) -> None:  # noqa: A002 (hsml's name)
        self.columnar_schema: list[dict[str, Any]] | None = None
        self.tensor_schema: dict[str, Any] | None = None
        if object is None:
            return
        if hasattr(object, "columns") and hasattr(object, "dtypes"):
            self.columnar_schema = [{"name": str(n), "type": str(t)} for n, t in zip(object.columns, object.dtypes)]
        elif type(object).__module__.startswith(("pandas", "polars")) and hasattr(object, "name"):   # a Series
            self.columnar_schema = [{"name": str(object.name), "type": str(object.dtype)}]
        elif isinstance(object, list) and object and all(isinstance(c, dict) for c in object):
            self.columnar_schema = [{"name": str(c["name"]), "type": str(c.get("type", ""))} for c in object]
        else:
            import numpy as np

            array = np.asarray(object)
            self.tensor_schema = {"type": str(array.dtype), "shape": list(array.shape)}

    def to_dict(self) -> dict[str, Any]:
        """The schema as hsml writes it into a model's record: columnar or tensor."""
        if self.columnar_schema is not None:
            return {"columnar_schema": self.columnar_schema}
        if self.tensor_schema is not None:
            return {"tensor_schema": self.tensor_schema}
        return {}

    def __repr__(self) -> str:
        return f"Schema({self.to_dict()})"
