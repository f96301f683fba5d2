"""Throughput of the data codecs: TFRecord write/read, and image decode+resize+crop.

    python bench/codecs.py [--records 2000] [--record-kb 100] [--runs 5] [--images 200]

TFRecord numbers are payload megabytes (10**6 bytes) per second for a temporary file that stays
in the page cache, the median of ``--runs`` runs; when TensorFlow is importable its writer and
readers run on the same data and the ratios are printed. Image numbers are images per second of
:func:`hopsml.data.pixels.transform` in this one process, with and without JPEG draft decoding.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hopsml.data.pixels import encode_jpeg, transform
from hopsml.formats.tfrecord import TFRecordWriter, read_records


def median_seconds(run: Callable[[], object], runs: int) -> float:
    """Run once to warm up, then return the median wall time of ``runs`` runs."""
    run()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def load_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import tensorflow as tf
    except ImportError:
        return None
    tf.get_logger().setLevel("ERROR")  # tf_record_iterator's deprecation notice
    return tf


def bench_tfrecord(records: int, record_kb: int, runs: int) -> None:
    payload = [os.urandom(record_kb * 1024) for _ in range(16)]
    data = [payload[i % len(payload)] for i in range(records)]
    megabytes = records * record_kb * 1024 / 1e6
    tf = load_tensorflow()

    with tempfile.TemporaryDirectory() as folder:
        ours = os.path.join(folder, "ours.tfrecord")
        theirs = os.path.join(folder, "theirs.tfrecord")

        def write_ours() -> None:
            with TFRecordWriter(ours) as writer:
                for record in data:
                    writer.write(record)

        def read_ours() -> int:
            return sum(1 for _ in read_records(ours))

        results = {"write": {"hopsml": megabytes / median_seconds(write_ours, runs)},
                   "read": {"hopsml": megabytes / median_seconds(read_ours, runs)}}
        if read_ours() != records:
            raise RuntimeError("hopsml read back the wrong number of records")

        if tf is not None:
            def write_tf() -> None:
                with tf.io.TFRecordWriter(theirs) as writer:
                    for record in data:
                        writer.write(record)

            def read_tf_iterator() -> int:
                return sum(1 for _ in tf.compat.v1.io.tf_record_iterator(theirs))

            def read_tf_dataset() -> int:
                dataset = tf.data.TFRecordDataset(theirs, buffer_size=1 << 20)
                return sum(1 for _ in dataset.as_numpy_iterator())

            results["write"]["tensorflow"] = megabytes / median_seconds(write_tf, runs)
            results["read"]["tensorflow"] = megabytes / median_seconds(read_tf_iterator, runs)
            results["read"]["tensorflow (tf.data)"] = megabytes / median_seconds(read_tf_dataset,
                                                                                 runs)
            if sum(1 for _ in read_records(theirs)) != records:
                raise RuntimeError("hopsml cannot read the file TensorFlow wrote")

    print(f"TFRecord, {records} records of {record_kb} KiB, payload MB/s, median of {runs} runs")
    for operation, numbers in results.items():
        line = f"  {operation:5s} hopsml {numbers['hopsml']:8.0f} MB/s"
        for name, value in numbers.items():
            if name != "hopsml":
                line += f" | {name} {value:6.0f} MB/s (ratio {numbers['hopsml'] / value:4.2f})"
        print(line)
    if tf is None:
        print("  tensorflow is not installed: comparison skipped")
    else:
        print(f"  tensorflow {tf.__version__}: tf.io.TFRecordWriter, "
              "tf.compat.v1.io.tf_record_iterator, tf.data.TFRecordDataset")


def photo(width: int, height: int, seed: int) -> np.ndarray:
    """A photo-like test picture: gradients, texture and sensor-like noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    phase = rng.uniform(0, 6.28, 3)
    base = np.stack([x * 255 / width, y * 255 / height,
                     128 + 60 * np.sin(x / 37 + phase[0]) * np.cos(y / 23 + phase[1])], -1)
    base += 25 * (np.sin(x / (5 + seed % 7) + phase[2]) * np.cos(y / 9))[..., None]
    base += rng.normal(0, 5, base.shape).astype(np.float32)
    return np.clip(base, 0, 255).astype(np.uint8)


def bench_images(count: int, runs: int) -> None:
    print(f"Image transform -> resize 200x200, crop 180x180, images/s, median of {runs} runs")
    for width, height, n in [(500, 375, count), (2000, 1500, max(count // 8, 10))]:
        jpegs = [encode_jpeg(photo(width, height, seed), quality=90) for seed in range(n)]
        kilobytes = sum(map(len, jpegs)) / n / 1024
        rates = {}
        for draft in (True, False):
            def transform_all(draft: bool = draft, jpegs: list[bytes] = jpegs) -> list:
                return [transform(j, (200, 200), (180, 180), draft=draft) for j in jpegs]

            seconds = median_seconds(transform_all, runs)
            rates[draft] = n / seconds
        print(f"  {width}x{height} JPEG ({kilobytes:.0f} KiB avg, {n} images): "
              f"draft {rates[True]:6.0f}/s | full decode {rates[False]:6.0f}/s "
              f"(ratio {rates[True] / rates[False]:4.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--record-kb", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--skip-images", action="store_true")
    parser.add_argument("--skip-tfrecord", action="store_true")
    args = parser.parse_args()
    if not args.skip_tfrecord:
        bench_tfrecord(args.records, args.record_kb, args.runs)
    if not args.skip_images:
        bench_images(args.images, args.runs)


if __name__ == "__main__":
    main()
