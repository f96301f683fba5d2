"""A small PyTorch CNN on the prepared digits images, data-parallel on the ranks of experiment.allreduce:

    spark-submit --master local[4] spark_jobs/train_torch.py --prepare-samples --workers 2 --epochs 3
    spark-submit --master local[4] spark_jobs/train_torch.py --mode ddp      # DistributedDataParallel, gloo

--mode hopsml averages the gradients with hopsml.torch.distribute (hopsml.collective, bucketed and
overlapped with backward); --mode ddp starts torch.distributed with hopsml.torch.init_process_group
and wraps the model in DistributedDataParallel. The dataset comes from `hopsml prep images` or
spark_jobs/preprocess_images.py (images 28x28); --prepare-samples prepares the bundled digits first.
The model is hopsml.examples.digits_cnn.
"""

import argparse
import sys
import tempfile

from hopsml import experiment
from hopsml.examples import digits_cnn


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="digits", help="a prepared image dataset (28x28)")
    parser.add_argument("--workers", type=int, default=None, help="ranks (default: the num_workers setting)")
    parser.add_argument("--mode", choices=digits_cnn.MODES, default="hopsml")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--name", default="digits-cnn-torch")
    parser.add_argument("--prepare-samples", action="store_true",
                        help="prepare the bundled digits images (as the quickstart does) first; a dataset of them "
                             "prepared before is reused, any other dataset of that name refused")
    parser.add_argument("--overwrite", action="store_true", help="with --prepare-samples: replace an existing dataset")
    args = parser.parse_args(argv)

    if args.prepare_samples:
        from hopsml import config
        from hopsml.data.commands import prepare_sample

        with tempfile.TemporaryDirectory(prefix="hopsml-samples-") as workdir:
            print(prepare_sample(config.load(), workdir, "digits", args.dataset, overwrite=args.overwrite))

    def train():
        return digits_cnn.train(args.dataset, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                                mode=args.mode)

    logdir, result = experiment.allreduce(train, name=args.name, num_workers=args.workers, metric_key="accuracy",
                                          description=f"small CNN in PyTorch, gradients by {args.mode}")
    print(f"accuracy {result['accuracy']:.4f}, {result['step_ms']:.1f} ms per step; experiment in {logdir}")
    return 0


if __name__ == "__main__":
    from hopsml.errors import HopsmlError

    try:
        sys.exit(main())
    except HopsmlError as exc:  # a clear message, not a traceback (an existing dataset, a failed rank)
        print(f"train_torch.py: error: {exc}", file=sys.stderr)
        sys.exit(1)
