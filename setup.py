"""The optional compiled part of hopsml: the same-host small all-reduce (hopsml/collective/_fastshm.c).

Everything else is in pyproject.toml. The extension is optional: without a C compiler (or off Linux) the build
goes on without it, and hopsml.collective uses its pure-Python path (it logs that once when it loads).
"""

import sys

from setuptools import Extension, setup

extensions = []
if sys.platform.startswith("linux"):
    extensions.append(Extension("hopsml.collective._fastshm", ["hopsml/collective/_fastshm.c"], optional=True,
                                extra_compile_args=["-O3", "-std=gnu11"]))

setup(ext_modules=extensions)
