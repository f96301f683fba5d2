"""Throughput of the data pipeline against its anchors, side by side in one run.

    python bench/data_prep.py [--images 2000 8000] [--master local[2]] [--rows 20000] [--runs 3]
        [--records 1000] [--skip images|reader|tfrecord]

1. Image job: images/s of ``prepare_images`` (Spark tasks over the listed paths, resize 224x224,
   no crop, PNG into TFRecord, Parquet, train/test split, statistics) against its limit on the
   same cores: a multiprocessing Pool(slots) doing the job's own per-image work (read, decode,
   resize, the job's PNG encoder) and writing nothing. The *limit ratio* (job / limit) is the
   share of the machine's per-image speed the job keeps after Spark, the listing, the TFRecord
   and Parquet writes and the statistics; a plain Pillow loop (Pillow's PNG at compress_level=1)
   is shown too, and both are checked to give the job's pixels. 500x375 JPEGs, 2000 and 8000
   of them by default; the runs are interleaved so that a busy moment hits every contender. The
   job's phases (listing, tasks, the slowest task, commit) show where its time goes. With
   petastorm installed, its ``materialize_dataset`` over a Spark DataFrame of the same images
   runs side by side.
2. Rank reader: rows/s of 32x32x3 uint8 images into numpy batches, hopsml's reader against
   petastorm's ``make_reader`` and a raw pyarrow read of the same Parquet files.
3. TFRecord write/read MB/s for 100 KiB records (bench/codecs.py; against TensorFlow if installed).
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _load_codecs_bench():
    """bench/codecs.py, loaded by path: its name would shadow the standard library's codecs."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("hopsml_bench_codecs", Path(__file__).with_name("codecs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_codecs = _load_codecs_bench()
bench_tfrecord, photo = _codecs.bench_tfrecord, _codecs.photo

from hopsml import config  # noqa: E402
from hopsml.cluster import session  # noqa: E402
from hopsml.data import pixels  # noqa: E402
from hopsml.data.images import prepare_images  # noqa: E402
from hopsml.data.pixels import encode_png_fast  # noqa: E402
from hopsml.data.readers import reader  # noqa: E402

RESIZE, CROP = (224, 224), None


def _pillow_one(path: str) -> bytes:
    """The plain Pillow loop: decode, RGB, resize, PNG through Pillow (compress_level=1)."""
    with Image.open(path) as image:
        resized = image.convert("RGB").resize(RESIZE, Image.Resampling.BILINEAR)
    out = io.BytesIO()
    resized.save(out, "PNG", compress_level=1)
    return out.getvalue()


def _same_encoder_one(path: str) -> bytes:
    """The job's own transform and PNG encoder: the per-image work of the job, nothing more."""
    with open(path, "rb") as handle:
        array = pixels.transform(handle.read(), RESIZE, CROP)
    return encode_png_fast(array)


def _plain_size(path: str) -> int:
    return len(_pillow_one(path))   # sizes, not bytes, go back: the pool's transfer is not the work


def _same_size(path: str) -> int:
    return len(_same_encoder_one(path))


def _check_same_pixels(settings: config.Settings) -> None:
    """The baselines must do the job's work: their PNGs decode to the pixels the job wrote."""
    batch = next(iter(reader("bench-jpegs", batch_size=8, shuffle=False, fields=["image", "path"],
                             settings=settings)))
    for path, image in zip(batch["path"], batch["image"]):
        local = path[len("file:"):]
        for fn in (_pillow_one, _same_encoder_one):
            if not np.array_equal(np.asarray(Image.open(io.BytesIO(fn(local)))), image):
                raise RuntimeError(f"{fn.__name__} does not give the job's pixels for {local}")


def write_jpegs(folder: str, count: int) -> list[str]:
    paths = []
    for i in range(count):
        label_dir = os.path.join(folder, f"class{i % 4}")
        os.makedirs(label_dir, exist_ok=True)
        path = os.path.join(label_dir, f"{i:05d}.jpg")
        with open(path, "wb") as out:
            out.write(pixels.encode_jpeg(photo(500, 375, i % 50), quality=90))
        paths.append(path)
    return paths


def _spread(rates: list[float]) -> str:
    return f"{statistics.median(rates):5.0f} img/s ({min(rates):.0f}-{max(rates):.0f})"


def _petastorm_materialize(src: str, workdir: str, paths: list[str], slots: int) -> float:
    """petastorm's own way, for comparison: a Spark DataFrame of decoded, resized images written
    inside ``materialize_dataset`` (Parquet only, no TFRecord, no split, no statistics)."""
    from petastorm.codecs import NdarrayCodec, ScalarCodec
    from petastorm.etl.dataset_metadata import materialize_dataset
    from petastorm.unischema import Unischema, UnischemaField, dict_to_spark_row
    from pyspark.sql.types import IntegerType

    spark = session.active()
    schema = Unischema("Bench", [UnischemaField("image", np.uint8, (RESIZE[1], RESIZE[0], 3), NdarrayCodec(), False),
                                 UnischemaField("label", np.int32, (), ScalarCodec(IntegerType()), False)])
    url = "file://" + os.path.join(workdir, "petastorm-out")

    def row(path: str):
        with open(path, "rb") as handle:
            array = pixels.transform(handle.read(), RESIZE, CROP)
        return dict_to_spark_row(schema, {"image": array, "label": int(os.path.basename(os.path.dirname(path))[5:])})

    start = time.perf_counter()
    with materialize_dataset(spark, url, schema, 64):
        rows = spark.sparkContext.parallelize(paths, slots).map(row)
        spark.createDataFrame(rows, schema.as_spark_schema()).write.mode("overwrite").parquet(url)
    return len(paths) / (time.perf_counter() - start)


def bench_image_job(workdir: str, count: int, runs: int, settings: config.Settings,
                    skip: tuple[str, ...] = ()) -> None:
    import importlib.util

    src = os.path.join(workdir, f"jpegs-{count}")
    paths = write_jpegs(src, count)
    spark = session.active()
    slots = min(os.cpu_count() or 1, spark.sparkContext.defaultParallelism)
    loops = {"plain": _plain_size, "same": _same_size}
    if "plain" in skip:
        del loops["plain"]
    rates: dict[str, list[float]] = {"job": [], "plain": [], "same": [], "petastorm": []}
    phases: list[dict[str, float]] = []
    has_petastorm = importlib.util.find_spec("petastorm") is not None
    with multiprocessing.get_context("fork").Pool(slots) as pool:
        for fn in loops.values():
            pool.map(fn, paths[:slots * 4])  # warm up
        warm = os.path.join(workdir, "warm-up")
        if not os.path.isdir(warm):
            write_jpegs(warm, 64)
        prepare_images(warm, "bench-warm-up", resize=RESIZE, crop=CROP, overwrite=True, settings=settings)
        for _ in range(runs):  # interleaved, so that a noisy moment hits every contender alike
            for name, fn in loops.items():
                start = time.perf_counter()
                pool.map(fn, paths, chunksize=8)
                rates[name].append(count / (time.perf_counter() - start))
            start = time.perf_counter()
            summary = prepare_images(src, "bench-jpegs", resize=RESIZE, crop=CROP, overwrite=True,
                                     settings=settings)
            rates["job"].append(count / (time.perf_counter() - start))
            phases.append(summary.phases)
            print(f"  run {len(phases)}: job {rates['job'][-1]:.0f}, limit {rates['same'][-1]:.0f} img/s, "
                  f"limit ratio {rates['job'][-1] / rates['same'][-1]:.2f}", flush=True)
            if has_petastorm:
                rates["petastorm"].append(_petastorm_materialize(src, workdir, paths, slots))
    if summary.written != count:
        raise RuntimeError(f"the image job wrote {summary.written} of {count} images")
    _check_same_pixels(settings)
    job = statistics.median(rates["job"])
    print(f"Image job, {count} JPEGs 500x375 -> resize {RESIZE[0]}x{RESIZE[1]} (no crop), PNG; median (min-max) "
          f"of {runs} interleaved runs; {settings.master}, {slots} task slots, {os.cpu_count()} cores")
    print(f"  hopsml prepare_images (Parquet + TFRecord, train/test, stats) {_spread(rates['job'])}")
    for name, label in (("plain", f"Pool({slots}) plain Pillow loop (Pillow PNG), writes nothing"),
                        ("same", f"Pool({slots}) the job's transform + PNG encoder, writes nothing = the limit")):
        if not rates[name]:
            continue
        print(f"  {label:72s} {_spread(rates[name])}  job/this {job / statistics.median(rates[name]):4.2f}")
    print(f"  limit ratio (job / the limit) {job / statistics.median(rates['same']):.2f}")
    if has_petastorm:
        print(f"  petastorm materialize_dataset (Spark DataFrame, Parquet only)  {_spread(rates['petastorm'])}")
    else:
        print("  petastorm is not installed here: materialize_dataset not measured "
              '(pip install ".[petastorm]")')
    keys = phases[0].keys()
    print("  job phases, median s: " + ", ".join(
        f"{key} {statistics.median(p[key] for p in phases):.2f}" for key in keys))
    if "empty-jobs" not in skip:
        bench_empty_jobs(src, runs)


def _count_frames(frames):
    import pandas as pd

    yield pd.DataFrame({"n": [sum(len(frame) for frame in frames)]})


def _count_paths(chunks):
    yield sum(len(chunk) for chunk in chunks)


def bench_empty_jobs(src: str, runs: int) -> None:
    """Why the image job is an RDD of listed paths: Spark's cost of an empty job over the same files."""
    from hopsml.data.images import DEFAULT_GLOB, deal, list_images

    spark = session.active()
    slots = os.cpu_count() or 1

    def dataframe() -> int:
        frame = (spark.read.format("binaryFile").option("recursiveFileLookup", "true")
                 .option("pathGlobFilter", DEFAULT_GLOB).load(src).select("path"))
        return sum(row.n for row in frame.mapInPandas(_count_frames, "n long").collect())

    def paths() -> int:
        listed = deal([path for path, _ in list_images(src)], slots)
        return sum(spark.sparkContext.parallelize(listed, slots).mapPartitions(_count_paths).collect())

    times: dict[str, list[float]] = {"dataframe": [], "paths": []}
    for _ in range(runs + 1):
        for name, fn in (("dataframe", dataframe), ("paths", paths)):
            start = time.perf_counter()
            seen = fn()
            times[name].append(time.perf_counter() - start)
    if seen != len(list_images(src)):
        raise RuntimeError(f"the empty job saw {seen} files")
    median = {name: statistics.median(values[1:]) for name, values in times.items()}
    print(f"  an empty job over the same files, median of {runs}: binaryFile + mapInPandas "
          f"{median['dataframe']:.3f} s | RDD of listed paths (the job's way) {median['paths']:.3f} s")


def bench_reader(workdir: str, rows: int, runs: int, settings: config.Settings) -> None:
    import importlib.util

    import pyarrow.parquet as pq

    from hopsml.data.codec import decode_column

    has_petastorm = importlib.util.find_spec("petastorm") is not None  # the hopsml[petastorm] stack

    src = os.path.join(workdir, "tiny")
    rng = np.random.default_rng(0)
    for i in range(rows):
        label_dir = os.path.join(src, f"c{i % 10}")
        os.makedirs(label_dir, exist_ok=True)
        png = pixels.encode_png(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8), compress_level=0)
        with open(os.path.join(label_dir, f"{i:06d}.png"), "wb") as out:
            out.write(png)
    start = time.perf_counter()
    summary = prepare_images(src, "bench-tiny", resize=None, crop=(32, 32), test_fraction=0, overwrite=True,
                             settings=settings)
    build = time.perf_counter() - start
    folder = os.path.join(os.path.expanduser(settings.root), "Projects", settings.project, "Datasets",
                          "bench-tiny", "parquet", "all")

    def ours() -> int:
        return sum(len(b["label"]) for b in reader("bench-tiny", batch_size=256, settings=settings))

    def ours_petastorm() -> int:
        return sum(len(b["label"]) for b in reader("bench-tiny", batch_size=256, engine="petastorm",
                                                   settings=settings))

    def raw_pyarrow() -> int:
        table = pq.read_table(folder, columns=["image", "label"])
        images = decode_column(table.column("image"), (32, 32, 3))
        labels = table.column("label").to_numpy()
        return len(np.ascontiguousarray(images)) + 0 * len(labels)

    limit = min(rows, 5000)

    def petastorm_make_reader() -> int:
        from petastorm import make_reader

        seen = 0
        with make_reader("file://" + folder, schema_fields=["image", "label"], num_epochs=1) as rows_:
            for _ in rows_:
                seen += 1
                if seen >= limit:
                    break
        return seen

    def rate(fn) -> float:
        fn()
        best = 0.0
        for _ in range(runs):
            start = time.perf_counter()
            count = fn()
            best = max(best, count / (time.perf_counter() - start))
        return best

    import warnings
    warnings.simplefilter("ignore")
    results = {"hopsml reader (arrow)": rate(ours)}
    if has_petastorm:
        results.update({"hopsml reader (petastorm engine)": rate(ours_petastorm),
                        "petastorm make_reader": rate(petastorm_make_reader)})
    else:
        print('  (petastorm is not installed: its rows need pip install ".[petastorm]", the legacy stack)')
    results["raw pyarrow read"] = rate(raw_pyarrow)
    print(f"Rank reader, {summary.written} images 32x32x3 uint8 -> numpy batches of 256, rows/s, best of {runs} "
          f"(dataset built in {build:.1f}s)")
    base = results["hopsml reader (arrow)"]
    for name, value in results.items():
        ratio = "" if name == "hopsml reader (arrow)" else f" (hopsml/this {base / value:6.2f})"
        print(f"  {name:34s} {value:10.0f} rows/s{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, nargs="+", default=[2000, 8000],
                        help="image counts of the image job runs (default 2000 8000)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--skip", nargs="*", default=(),
                        choices=("images", "reader", "tfrecord", "plain", "empty-jobs"),
                        help="leave out parts: plain (the Pillow loop), empty-jobs (Spark's cost of an empty job)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hopsml-bench-") as workdir:
        settings = config.load(root=os.path.join(workdir, "root"), project="bench", master=args.master,
                               log_dir=os.path.join(workdir, "logs"))
        session.get_or_create(settings, app_name="hopsml-bench")
        if "images" not in args.skip:
            for count in args.images:
                bench_image_job(workdir, count, args.runs, settings, tuple(args.skip))
        if "reader" not in args.skip:
            bench_reader(workdir, args.rows, args.runs, settings)
    if "tfrecord" not in args.skip:
        bench_tfrecord(args.records, 100, args.runs)


if __name__ == "__main__":
    main()
