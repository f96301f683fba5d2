"""hsfs.hopsworks_udf: the @udf decorator."""

from hopsml.featurestore.transformations import udf

__all__ = ["udf"]
