"""hopsml: Spark-integrated ML pipelines — prepare data, train data-parallel, search, version everything.

    from hopsml import experiment, collective, tensorboard, hdfs, devices

Importing hopsml starts nothing and configures nothing; Spark starts when a verb first needs it.
"""

from importlib.metadata import PackageNotFoundError, version

# The name pip knows hopsml by (the package index's "hopsml" is an unrelated project); `import hopsml` is unchanged.
DISTRIBUTION = "hopsml-platform"

try:
    __version__ = version(DISTRIBUTION)
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
