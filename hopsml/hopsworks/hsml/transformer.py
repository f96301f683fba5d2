"""hsml.transformer.Transformer: a script with a `Transformer` class (`preprocess(self, inputs)`,
`postprocess(self, outputs)`) that a deployment runs around its predictor; the serving runs it in the same
instances (hopsml.serving's transformer)."""

from __future__ import annotations


class Transformer:
    """A transformer script to give to `model.deploy(transformer=...)` or `ms.create_predictor(transformer=...)`."""

    def __init__(self, script_file: str, resources: object = None, **kwargs: object) -> None:
        self.script_file, self.resources = script_file, resources

    def __repr__(self) -> str:
        return f"Transformer({self.script_file!r})"

    @property
    def num_instances(self) -> int:
        """Instances asked for in `resources` (a dict or hsml's resources object); 1 when not said."""
        resources = self.resources
        found = resources.get("num_instances") if isinstance(resources, dict) else getattr(resources,
                                                                                            "num_instances", None)
        return int(found or 1)


__all__ = ["Transformer"]
