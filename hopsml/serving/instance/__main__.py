"""The program of a serving's instance process: `python -m hopsml.serving.instance` (started by the supervisor).

An instance runs users' predictor scripts and the libraries they import, so its `__main__` must look like any
program's: with `python -c`, `__main__` has neither `__spec__` nor `__file__`, which libraries take for a doctest
run (pyspark.sql.connect, imported by great_expectations, then exits the process with code 0 when grpc is not
installed). A module of its own, which the package does not import, keeps serve.py from being loaded twice.
"""

import sys

from hopsml.serving.instance.serve import main

if __name__ == "__main__":
    sys.exit(main())
