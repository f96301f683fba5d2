"""spark-submit entry point: a folder of label folders of images -> a hopsml dataset.

    spark-submit spark_jobs/preprocess_images.py SRC DATASET [--resize 200x200] [--crop WxH]
        [--shards N] [--format png|jpeg] [--strict] [--overwrite] [--root URI] [--project NAME]

Same options as `hopsml prep images`; the work is done by hopsml.data.images.prepare_images.
"""

import sys

from hopsml.data.commands import job_main

if __name__ == "__main__":
    sys.exit(job_main("images"))
