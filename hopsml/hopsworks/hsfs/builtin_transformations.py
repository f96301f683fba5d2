"""hsfs.builtin_transformations: the built-in transformation functions."""

from hopsml.featurestore.transformations import (
    label_encoder,
    min_max_scaler,
    one_hot_encoder,
    robust_scaler,
    standard_scaler,
)

__all__ = ["label_encoder", "min_max_scaler", "one_hot_encoder", "robust_scaler", "standard_scaler"]
