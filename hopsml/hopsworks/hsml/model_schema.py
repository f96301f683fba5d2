"""hsml.model_schema.ModelSchema: a model's input and output schemas, given to `create_model(model_schema=)`."""

from __future__ import annotations

from typing import Any

from hopsml.hopsworks.hsml.schema import Schema


class ModelSchema:
    """A model's input and output schemas (hsml's ModelSchema), registered with the model."""
    def __init__(self, input_schema: Schema | None = None, output_schema: Schema | None = None, **_: object) -> None:
        self.input_schema, self.output_schema = input_schema, output_schema

    def to_dict(self) -> dict[str, Any]:
        """Both schemas as hsml writes them into a model's record."""
        out = {}
        if self.input_schema is not None:
            out["input_schema"] = self.input_schema.to_dict()
        if self.output_schema is not None:
            out["output_schema"] = self.output_schema.to_dict()
        return out

    def __repr__(self) -> str:
        return f"ModelSchema({self.to_dict()})"
