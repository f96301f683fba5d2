"""Grid search over learning rate and dropout of the digits model, one Spark task per trial:

    spark-submit --master local[4] spark_jobs/grid_search.py --lr 0.05 0.5 --dropout 0.0 0.3 0.6
"""

import argparse
import sys

from hopsml import experiment
from hopsml.examples import digits


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lr", type=float, nargs="+", default=[0.05, 0.5])
    parser.add_argument("--dropout", type=float, nargs="+", default=[0.0, 0.3, 0.6])
    parser.add_argument("--early-stopping", choices=["median"], default=None)
    parser.add_argument("--name", default="digits-grid")
    args = parser.parse_args(argv)
    logdir, best, outputs = experiment.grid_search(
        digits.train_with_dropout, {"lr": args.lr, "dropout": args.dropout}, direction="max",
        optimization_key="accuracy", name=args.name, early_stopping=args.early_stopping)
    print(f"best {best}: accuracy {outputs['accuracy']:.4f}; experiment in {logdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
