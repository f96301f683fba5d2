"""Hyperparameter search: spaces, strategies and early stopping; the verbs are in hopsml.experiment."""

from hopsml.search.space import Direction

__all__ = ["Direction"]
