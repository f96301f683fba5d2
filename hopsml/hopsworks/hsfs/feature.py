"""hsfs.feature.Feature: a feature of a group, and the comparisons that make filters."""

from hopsml.featurestore.query import Feature

__all__ = ["Feature"]
