"""Data-parallel training of the digits model under spark-submit, one rank per barrier task:

    spark-submit --master local[4] spark_jobs/train_allreduce.py --workers 2 --epochs 10
    spark-submit --master spark://host:7077 --conf spark.executor.resource.gpu.amount=1 \\
        --conf spark.task.resource.gpu.amount=1 spark_jobs/train_allreduce.py --workers 4 --gpus-per-worker 1
"""

import argparse
import sys

from hopsml import experiment
from hopsml.examples import digits


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=None, help="ranks (default: the num_workers setting)")
    parser.add_argument("--gpus-per-worker", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--name", default="digits-allreduce")
    args = parser.parse_args(argv)

    def train():
        return digits.train_data_parallel(lr=args.lr, epochs=args.epochs, batch_size=args.batch_size)

    logdir, result = experiment.allreduce(train, name=args.name, num_workers=args.workers,
                                          gpus_per_worker=args.gpus_per_worker, metric_key="accuracy")
    print(f"accuracy {result['accuracy']:.4f}; experiment in {logdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
