"""The data commands of the ``hopsml`` CLI: ``prep images|tabular`` and ``datasets list|show|clean``.

``add_commands(subparsers)`` adds them to the CLI's parser; ``run(args, settings)`` runs the one
that was parsed and returns the text to print.
"""

from __future__ import annotations

import argparse
import json
import posixpath
from typing import Any

from hopsml import config
from hopsml.cli_tables import format_fields, format_table, number, pairs
from hopsml.data import dataset as ds
from hopsml.fs import Storage
from hopsml.records import BROKEN, BrokenRecordError
from hopsml.redact import redact_uri

COMMANDS = ("prep", "datasets")


def _size(text: str) -> tuple[int, int] | None:
    """'200x180' or '200' -> (width, height); 'none' -> None."""
    if text.lower() == "none":
        return None
    width, _, height = text.lower().partition("x")
    try:
        return int(width), int(height or width)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT (e.g. 200x200) or 'none'") from None


def _csv_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``prep`` and ``datasets`` to the CLI's subparsers."""
    prep = subparsers.add_parser("prep", help="prepare a dataset with Spark: images or a CSV table")
    kinds = prep.add_subparsers(dest="prep_kind", required=True)

    _images_args(kinds.add_parser("images", help="a folder of label folders of images (JPEG, PNG, WebP, GIF, TIFF, "
                                                 "BMP, ...) -> Parquet + TFRecord"))
    _table_args(kinds.add_parser("tabular", help="a CSV table -> train/test Parquet + TFRecord + transform"))

    datasets = subparsers.add_parser("datasets", help="list and inspect prepared datasets")
    actions = datasets.add_subparsers(dest="datasets_action", required=True)
    actions.add_parser("list", help="the finished datasets of the project")
    show = actions.add_parser("show", help="one dataset: manifest, counts, statistics")
    show.add_argument("name", help="the dataset's name, as in 'hopsml datasets list'")
    show.add_argument("--html", action="store_true", help="print the path of the statistics page")
    show.add_argument("--json", dest="raw", action="store_true", help="print the manifest (dataset.json) as it is")
    clean = actions.add_parser("clean", help="remove the hidden staging folders of data jobs killed with "
                                             "their driver (no heartbeat for lost_after_s)")
    clean.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    clean.add_argument("--older-than", type=float, metavar="SECONDS",
                       help="idle for at least this long (default: the lost_after_s setting)")


def _images_args(images: argparse.ArgumentParser) -> None:
    images.add_argument("src", help="folder (path or URI) with one folder per label")
    images.add_argument("dataset", help="name of the dataset under Projects/<project>/Datasets/")
    images.add_argument("--resize", type=_size, default=(200, 200),
                        help="resize every image to WIDTHxHEIGHT, aspect ratio not kept (default 200x200; "
                             "'none' keeps the size, then --crop must be given)")
    images.add_argument("--crop", type=_size, default=None,
                        help="after the resize, center-crop to WIDTHxHEIGHT (default: no crop, the images "
                             "are the --resize size)")
    images.add_argument("--format", dest="image_format", choices=("png", "jpeg"), default="png",
                        help="encoding of image/encoded in the TFRecord shards")
    images.add_argument("--glob", default=None,
                        help="file name pattern (default: every extension Pillow decodes, lower or upper case: "
                             "jpg, jpeg, png, webp, gif, tif, tiff, bmp, ...)")
    images.add_argument("--test-fraction", type=float, default=0.2,
                        help="share of images in the 'test' split, by a hash of their path (0: one split 'all')")
    images.add_argument("--max-file-mb", type=float, default=256.0, metavar="MB",
                        help="reject larger files without reading them (default 256)")
    _common(images)
    images.add_argument("--strict", action="store_true", help="fail instead of skipping bad images")


def _table_args(table: argparse.ArgumentParser) -> None:
    table.add_argument("src", help="CSV file or folder of CSV files (path or URI)")
    table.add_argument("dataset", help="name of the dataset under Projects/<project>/Datasets/")
    table.add_argument("--label", required=True, help="the label column")
    table.add_argument("--no-header", dest="header", action="store_false", help="the file has no header line")
    table.add_argument("--columns", type=_csv_list, help="column names, comma separated (for files without header)")
    table.add_argument("--na-values", type=_csv_list, default=None,
                       help="texts meaning missing, comma separated (default: '?' and pandas' missing texts: "
                            "nan, NaN, NA, N/A, null, None, ...; an empty cell is always missing)")
    table.add_argument("--missing", choices=("drop", "fill"), default="drop", help="rows with missing values")
    table.add_argument("--categorical", type=_csv_list, help="columns to treat as categories")
    table.add_argument("--exclude", type=_csv_list,
                       help="columns that are not features (ids, free text), comma separated; a column without a "
                            "name in the header (R's row names, a pandas index) is left out anyway")
    table.add_argument("--schema", type=json.loads, help='column types as JSON, e.g. {"age": "int"}')
    table.add_argument("--one-hot", action="store_true", help="one-hot encode categorical columns")
    table.add_argument("--standardize", action="store_true", help="standardise numeric columns (train statistics)")
    table.add_argument("--test-fraction", type=float, default=0.2,
                       help="share of rows in the 'test' split, by a hash of the row and --seed (0: one split 'all')")
    table.add_argument("--seed", type=int, default=0, help="the split's seed: the same seed gives the same split")
    table.add_argument("--delimiter", default=",", help="the CSV files' field separator")
    table.add_argument("--skip-rows", type=int, default=0, metavar="N",
                       help="lines to skip at the start of each file, before the header "
                            "(e.g. 1 for scikit-learn's CSVs)")
    _common(table)
    table.add_argument("--strict", action="store_true", help="fail instead of rejecting malformed rows")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shards", type=int, help="least number of shards (default: enough for num_workers)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing dataset of that name")


def job_main(kind: str, argv: list[str] | None = None) -> int:
    """The spark-submit entry points: ``prep images|tabular`` options plus --root/--project."""
    import sys

    from hopsml.errors import HopsmlError

    parser = argparse.ArgumentParser(prog=f"preprocess_{'images' if kind == 'images' else 'tabular'}.py",
                                     description=f"prepare a hopsml dataset from {kind} with Spark")
    parser.add_argument("--root", help="root URI (default: HOPSML_ROOT, conf/hopsml.toml, ~/hopsml)")
    parser.add_argument("--project", help="project name (default: HOPSML_PROJECT, conf/hopsml.toml, demo)")
    (_images_args if kind == "images" else _table_args)(parser)
    args = parser.parse_args(argv)
    args.command, args.prep_kind = "prep", kind
    try:
        print(run(args, config.load(root=args.root, project=args.project)))
    except HopsmlError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    return 0


def run(args: argparse.Namespace, settings: config.Settings) -> str:
    """Run the parsed data command; returns what to print."""
    if args.command == "prep":
        if args.prep_kind == "images":
            from hopsml.data.images import DEFAULT_GLOB, prepare_images

            return str(prepare_images(args.src, args.dataset, resize=args.resize, crop=args.crop,
                                      shards=args.shards, glob=args.glob or DEFAULT_GLOB, strict=args.strict,
                                      image_format=args.image_format, overwrite=args.overwrite,
                                      test_fraction=args.test_fraction, max_file_mb=args.max_file_mb,
                                      settings=settings))
        else:
            from hopsml.data.tables import DEFAULT_NA_VALUES, prepare_table

            summary = prepare_table(args.src, args.dataset, label=args.label, header=args.header,
                                    columns=args.columns, schema=args.schema,
                                    na_values=DEFAULT_NA_VALUES if args.na_values is None else args.na_values,
                                    missing=args.missing, categorical=args.categorical, exclude=args.exclude,
                                    one_hot=args.one_hot, standardize=args.standardize,
                                    test_fraction=args.test_fraction, seed=args.seed, shards=args.shards,
                                    delimiter=args.delimiter, skip_rows=args.skip_rows, strict=args.strict,
                                    overwrite=args.overwrite, settings=settings)
        return str(summary)
    if args.datasets_action == "list":
        return datasets_list(settings)
    if args.datasets_action == "clean":
        return datasets_clean(settings, dry_run=args.dry_run, older_than_s=args.older_than)
    return datasets_show(settings, args.name, html=args.html, raw=args.raw)


def datasets_list(settings: config.Settings) -> str:
    """A table of the finished datasets: name, kind, rows per split, rejected, created."""
    storage = Storage(settings.root)
    rows: list[dict[str, Any]] = []
    broken: list[str] = []
    for name, manifest in ds.scan(storage, settings.project):
        if isinstance(manifest, BrokenRecordError):
            rows.append({"name": name, "kind": BROKEN})
            broken.append(f"{name}: {BROKEN}: {manifest.reason}")
            continue
        counts = manifest.get("counts") or {}
        rows.append({"name": name, "kind": manifest.get("kind"),
                     "rows": ",".join(f"{k}={v.get('rows')}" for k, v in manifest["splits"].items()),
                     "rejected": counts.get("rejected"), "skipped": counts.get("skipped"),
                     "created": (manifest.get("created") or "")[:19],
                     "source": redact_uri(manifest["source"]) if isinstance(manifest.get("source"), str) else None})
    if not rows:
        return f"no datasets in project {settings.project!r} under {storage.uri()}"
    table = format_table(rows, ("name", "kind", "rows", "rejected", "skipped", "created", "source"))
    if broken:
        table += "\n\nrecords that cannot be read ('hopsml datasets show NAME' says more):\n" + "\n".join(broken)
    return table


def datasets_clean(settings: config.Settings, *, dry_run: bool = False, older_than_s: float | None = None) -> str:
    """Remove (or with `dry_run` list) the staging folders that killed data jobs left behind."""
    storage = Storage(settings.root)
    bound = settings.lost_after_s if older_than_s is None else older_than_s
    if bound < 0:
        raise ds.DatasetError(f"--older-than must be 0 or more seconds, got {older_than_s:g}")
    if dry_run:
        stale = ds.stale_staging(storage, settings.project, bound)
        return "\n".join(f"would remove {s}" for s in stale) or _no_stale(storage, settings, bound)
    removed = ds.remove_stale_staging(storage, settings.project, bound)
    return "\n".join(f"removed {s}" for s in removed) or _no_stale(storage, settings, bound)


def _no_stale(storage: Storage, settings: config.Settings, bound: float) -> str:
    return (f"no staging folders idle for more than {bound:g}s in project {settings.project!r} "
            f"under {storage.uri()}")


def _option_text(value: object) -> str:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"{value[0]}x{value[1]}"   # a size: resize, crop
    if isinstance(value, list):
        return ",".join(map(str, value))
    if isinstance(value, str) and (not value.strip() or any(c in value for c in ", ")):
        return repr(value)  # a delimiter ',' or ' ' is seen
    return number(value)


def _reasons(reasons: object) -> str:
    if not isinstance(reasons, dict) or not reasons:
        return ""
    return " (" + ", ".join(f"{k}: {v}" for k, v in reasons.items()) + ")"


def _dataset_summary(name: str, manifest: dict[str, Any]) -> str:
    """The manifest as a person reads it: what the dataset holds, where it came from, how it was made."""
    created = str(manifest.get("created") or "")[:19].replace("T", " ")
    source = manifest.get("source")
    title = f"dataset {name} ({manifest.get('kind')})"
    if created:
        title += f", prepared {created}"
    if isinstance(source, str):
        title += f" from {redact_uri(source)}"
    if isinstance(manifest.get("seconds"), (int, float)):
        title += f" in {manifest['seconds']:.1f} s"
    splits = ", ".join(f"{split} {entry.get('rows')} rows" + (f" ({entry['shards']} shards)" if entry.get("shards")
                                                               else "")
                       for split, entry in (manifest.get("splits") or {}).items())
    counts = dict(manifest.get("counts") or {})
    count_text = ", ".join(f"{k} {v}" + _reasons(manifest.get(f"{k}_reasons")) for k, v in counts.items())
    fields = ", ".join(f"{field} {spec.get('dtype')}" + ("" if not spec.get("shape") else
                                                          "[" + "x".join(map(str, spec["shape"])) + "]")
                       for field, spec in (manifest.get("fields") or {}).items())
    labels = manifest.get("labels") or []
    label_text = ", ".join(map(str, labels[:12])) + (", …" if len(labels) > 12 else "")
    options = ", ".join(f"{k}={_option_text(v)}" for k, v in (manifest.get("options") or {}).items() if v is not None)
    model = manifest.get("model")
    return "\n".join([title, format_fields([
        ("splits", splits),
        ("counts", count_text),
        ("fields", fields),
        ("reads", ", ".join(manifest.get("default_fields") or [])),
        ("label", manifest.get("label_field")),
        ("labels", f"{label_text} ({len(labels)})" if labels else None),
        ("model", pairs(model, sep=", ") if isinstance(model, dict) else model),
        ("made from", manifest.get("source_uri")),
        ("options", options),
    ])])


def datasets_show(settings: config.Settings, name: str, html: bool = False, raw: bool = False) -> str:
    """One dataset: a readable summary of its manifest (`raw`: the manifest as JSON), its files and a
    short statistics summary."""
    storage = Storage(settings.root)
    ddir, manifest = ds.open_dataset(storage, settings.project, name)
    if html:
        return storage.uri(ddir.stats_html)
    if raw:
        return json.dumps(manifest, indent=2, default=str)
    lines = [_dataset_summary(name, manifest), "", f"files in {storage.uri(ddir.path)}:"]
    for rel in storage.ls(ddir.path):
        base = posixpath.basename(rel)
        count = len(storage.ls(rel, recursive=True)) if storage.isdir(rel) else None
        lines.append(f"  {base}" + (f"/ ({count} files)" if count is not None else ""))
    if storage.exists(ddir.stats_json):
        stats = storage.read_json(ddir.stats_json)
        lines += ["", "statistics (count / missing / mean or top value per split):"]
        for column in stats.get("columns", []):
            cells = []
            for split, entry in column["splits"].items():
                main = (f"mean {entry['mean']:.4g}" if entry.get("mean") is not None
                        else f"top {entry['top'][0][0]!r}" if entry.get("top") else "")
                cells.append(f"{split}: {entry.get('count', 0)} / {entry.get('missing', 0)} / {main}")
            lines.append(f"  {column['name']:<24} " + " | ".join(cells))
        lines.append(f"  page: {storage.uri(ddir.stats_html)}")
    return "\n".join(lines)


SAMPLES = ("digits", "iris")


def sample_source(sample: str, limit: int | None = None) -> str:
    """What a sample dataset's manifest names as its source: the bundled data set, not the temporary
    folder it was written to on the way (gone once the dataset is prepared)."""
    return f"hopsml-sample:{sample}" + (f"?limit={limit}" if limit is not None else "")


def _existing_sample(storage: Storage, settings: config.Settings, sample: str, dataset: str,
                     limit: int | None) -> str | None:
    """'reused ...' when `dataset` is a complete dataset of this very sample; None when there is no
    dataset of that name; a clear refusal when it holds other data (it is never replaced silently)."""
    ddir = ds.DatasetDir.of(settings.project, dataset)
    if not storage.exists(ddir.path):
        return None
    try:
        _, manifest = ds.open_dataset(storage, settings.project, dataset)
    except (ds.DatasetError, OSError, ValueError):
        manifest = {}
    source = manifest.get("source")
    if source == sample_source(sample, limit):
        rows = ", ".join(f"{k} {v.get('rows')}" for k, v in manifest.get("splits", {}).items())
        return (f"dataset {dataset!r} ({source}, prepared {str(manifest.get('created', ''))[:19]}; {rows} rows) "
                f"is there already: reused")
    what = (f"prepared from {redact_uri(source)!r}" if isinstance(source, str)
            else "not a complete dataset (no _SUCCESS or dataset.json)" if not manifest else "of unknown source")
    raise ds.DatasetExistsError(
        f"dataset {dataset!r} already exists at {storage.uri(ddir.path)}, {what}, not hopsml's bundled {sample!r} "
        f"sample; it is kept. Pass --overwrite to replace it with the sample, or use another project (--project) "
        "or dataset name")


def prepare_sample(settings: config.Settings, workdir: str, sample: str, dataset: str | None = None, *,
                   limit: int | None = None, overwrite: bool = False) -> str:
    """Prepare the bundled `sample` ('digits': images, 32x32 cropped to 28x28; 'iris': a table) as
    `dataset` (default: the sample's name), writing its files to `workdir` on the way.

    An existing complete dataset of the same sample is reused, any other dataset of that name refused
    (DatasetExistsError) unless `overwrite`; returns what happened, to print.
    """
    import os

    from hopsml.data import samples
    from hopsml.data.images import prepare_images
    from hopsml.data.tables import prepare_table

    if sample not in SAMPLES:
        raise ds.DatasetError(f"no bundled sample {sample!r}; the samples are {', '.join(SAMPLES)}")
    dataset = dataset or sample
    storage = Storage(settings.root)
    if not overwrite:
        reused = _existing_sample(storage, settings, sample, dataset, limit)
        if reused is not None:
            return reused
    summary: ds.DatasetSummary
    if sample == "digits":
        image_dir = os.path.join(workdir, "digits")
        if not os.path.isdir(image_dir):
            samples.write_digits(image_dir, limit=limit)
        summary = prepare_images(image_dir, dataset, resize=(32, 32), crop=(28, 28), overwrite=overwrite,
                                 settings=settings)
    else:
        table_path = os.path.join(workdir, "iris.csv")
        if not os.path.isfile(table_path):
            samples.write_table(table_path)
        summary = prepare_table(table_path, dataset, label="species", missing="fill", standardize=True,
                                overwrite=overwrite, settings=settings)
    manifest_rel = ds.DatasetDir.of(settings.project, dataset).manifest
    storage.write_json(manifest_rel, {**storage.read_json(manifest_rel), "source": sample_source(sample, limit)})
    return str(summary)


def prepare_samples(settings: config.Settings, workdir: str, *, limit: int | None = None,
                    overwrite: bool = False) -> list[str]:
    """The datasets 'digits' and 'iris' from the bundled samples (see prepare_sample): what the
    quickstart runs first. Both names are checked before either is prepared."""
    storage = Storage(settings.root)
    if not overwrite:
        for sample in SAMPLES:
            _existing_sample(storage, settings, sample, sample, limit)  # refuses before any Spark work
    return [prepare_sample(settings, workdir, sample, limit=limit, overwrite=overwrite) for sample in SAMPLES]
