"""spark-submit entry point for the quickstart: `spark-submit spark_jobs/quickstart.py`."""

import sys

from hopsml import cli

if __name__ == "__main__":
    sys.exit(cli.main(["quickstart", *sys.argv[1:]]))
