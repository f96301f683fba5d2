"""hsfs's module names over hopsml's feature store, for programs written against hopsworks' hsfs."""

from hopsml.featurestore.query import Feature, Query
from hopsml.featurestore.transformations import udf

__all__ = ["Feature", "Query", "udf"]
