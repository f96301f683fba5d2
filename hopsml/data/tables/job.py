"""The steps of `prepare_table`'s Spark job, sharing the parsed input between them."""

from __future__ import annotations

import json
import logging
import math
import pickle
import types
import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hopsml import config, layout
from hopsml.cluster import preflight
from hopsml.cluster.handle import SparkHandle
from hopsml.data import dataset as ds
from hopsml.data.manifest import Manifest
from hopsml.data.tables.csv import HINT, CsvSource, column_names, csv_source, is_number, read_text
from hopsml.data.tables.inference import Inference, infer_types, one_row
from hopsml.data.tables.options import (
    CORRUPT,
    FIELDS,
    INTEGRAL_TYPES,
    REASON,
    ROW_HASH,
    SAMPLE_ROWS,
    SAMPLED,
    SHARD,
    SPLIT,
    SPLITS,
    UNKNOWN,
    WIDE_COLUMNS,
    TableOptions,
    field_names,
    sanitize,
)
from hopsml.data.tables.parsing import sql_name, sql_text, sql_tuple
from hopsml.data.tables.transform import Transform
from hopsml.data.tables.typed import Read, Typing, summarized_columns
from hopsml.data.tables.writers import JsonLinesWriter, TableShardWriter, fill_missing_shards
from hopsml.fs import Storage
from hopsml.redact import redact_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


class _TableJob:
    """The steps of :func:`prepare_table`, sharing the parsed input between them."""

    STEPS = 6   # read, reject, statistics, fit, write, finish: the progress display's fixed total

    engine = "spark"   # what prepared the table, as the summary says

    def __init__(self, spark: SparkSession | None, storage: Storage, settings: config.Settings, src: str,
                 name: str, options: TableOptions) -> None:
        self.spark: Any = spark   # None for a table prepared without Spark (local.py)
        self.storage, self.settings = storage, settings
        self.handle: Any = SparkHandle.of(spark) if spark is not None else None
        self.src, self.name, self.options = src, name, options
        self.progress: Any = None
        self.source_names: dict[str, str] = {}
        self.left_out: dict[str, str] = {}    # field name -> why it is not a feature
        # the Python tasks (the writers) check their executor's stack before they run
        self.checks = preflight.Preflight(preflight.driver_stack() if settings.check_versions else None, {})

    def _step(self, name: str) -> None:
        if self.progress is not None:
            self.progress.step(name)

    def run(self, stage: ds.DatasetDir) -> ds.DatasetSummary:
        try:
            return self._run(stage)
        except Exception as exc:  # an executor with another stack is named; anything else goes on up
            preflight.explain_failure(self.handle, exc, self.checks, self.handle.default_parallelism)
            raise

    def _run(self, stage: ds.DatasetDir) -> ds.DatasetSummary:
        from hopsml.data import stats as stats_mod

        self._step("read")
        source = csv_source(self.spark, self.src, self.options)
        read = self._read(source, multiline=False)
        try:
            read = self._reread(source, read)
            self._adopt(read)
            if read.inference.read == 0:
                raise ds.DatasetError(f"{redact_uri(self.src)!r} has no data rows; check the path and header=")
            self._check_given_types(read.names, read.inference)
            return self._run_typed(stage, read, stats_mod)
        finally:
            read.parsed.unpersist()

    def _reread(self, source: CsvSource, read: Read) -> Read:
        """``read``, or a reading of the text with other options that leaves fewer rows malformed: each file
        whole (quoted fields that hold line breaks), quotes escaped by a backslash (Spark's CSV writer), a
        first field that the header does not name (R's write.table)."""
        opts = self.options

        def better(other: Read | None, keep: bool, why: str) -> Read:
            if other is None:
                return read
            if not keep:
                other.parsed.unpersist()
                return read
            read.parsed.unpersist()
            log.info("%s: %s", redact_uri(self.src), why)
            return other

        if read.inference.malformed_quoted and isinstance(source, str):
            # a quoted field holds a line break (or a row its quote): read each file whole instead
            multi = self._read(source, multiline=True)
            read = better(multi, multi.inference.malformed < read.inference.malformed,
                          "quoted fields span lines; read each file whole")
        if read.inference.escaped and isinstance(source, str):
            # Spark's CSV writer escapes a quote inside a field with a backslash, not by doubling it
            again = self._read(source, read.multiline, escape="\\")
            read = better(again, again.inference.escaped < read.inference.escaped
                          and again.inference.malformed <= read.inference.malformed,
                          "quotes inside fields are escaped with a backslash; read so")
        inference = read.inference
        if (inference.read and inference.malformed == inference.read and opts.header and not opts.columns
                and not any(is_number(raw) for raw in read.source_names.values())):
            # R's write.table: the header is one name short of every row, whose first field is its row name
            # (pandas reads that column as the index). A "header" of numbers is a preamble line instead, as
            # scikit-learn's CSV files start with one: that stays an error whose hint names --skip-rows
            try:
                named: Read | None = self._read(source, read.multiline, read.escape, row_names=True)
            except ds.DatasetError:   # e.g. no feature column would be left: the rows stay rejected
                named = None
            read = better(named, named is not None and named.inference.malformed < inference.malformed,
                          "the header is one name short of the rows: their first field is a row name, left out")
        return read

    def _adopt(self, read: Read) -> None:
        self.source_names, self.left_out, self._raw = read.source_names, read.left_out, read.raw

    def _read(self, source: CsvSource, multiline: bool, escape: str = '"', row_names: bool = False) -> Read:
        """The table typed, cached (every later step reads it), with its names and what the reading
        told (:class:`Inference`). With ``row_names`` every row starts with a field the header does
        not name (left out as a nameless column).

        The types are inferred from the first ``SAMPLE_ROWS`` rows, then checked on every row in the
        pass that fills the cache: a column that the rest of the table types otherwise is typed again
        from all of its text, so the types are those that every row gives, without a pass of their own."""

        opts = self.options
        raw_names = column_names(self.spark, source, opts, multiline, escape)
        if row_names:
            raw_names = ["_c0", *[name if name != f"_c{i}" else f"_c{i + 1}" for i, name in enumerate(raw_names)]]
        names, label = self._names(raw_names)
        raw = read_text(self.spark, source, names, opts, multiline, escape)
        left_out = self._left_out(names, raw_names, label)
        na = sorted({v.strip() for v in opts.na_values} | {""})
        quoted = [sql_name(n) for n in names]
        trimmed = raw.selectExpr(*[f"trim({n}) AS {n}" for n in quoted], sql_name(CORRUPT))   # trimmed once
        cleaned = trimmed.selectExpr(*[f"CASE WHEN {n} IN {sql_tuple(na)} THEN NULL ELSE {n} END AS {n}"
                                       for n in quoted], sql_name(CORRUPT))
        kept = [n for n in names if n not in left_out]
        table = Typing(names, kept, opts)
        inference = None
        if len(names) <= WIDE_COLUMNS:
            guess = infer_types(cleaned.limit(SAMPLE_ROWS), names, opts).types
            parsed, rejected = table.parse(cleaned, guess)
            inference = table.check(parsed, rejected, guess)
            if inference is None:   # the first rows misled
                parsed.unpersist()
        if inference is None:   # the types of every row's text, from a pass of its own (also when a typed
            # pass checking 1,000 columns would cost more than it saves)
            inference = infer_types(cleaned, names, opts)
            parsed, rejected = table.parse(cleaned, inference.types, strict=False)
        for name in left_out:
            inference.failures.pop(name, None)
        return Read(parsed, rejected, kept, names, label, inference, dict(zip(names, raw_names)), left_out, raw,
                    multiline, escape)

    def _names(self, raw_names: list[str]) -> tuple[list[str], str]:
        """The field names of the header's (or columns=) names, and the label's; distinct, with the label."""
        names = field_names(raw_names)
        if len(set(names)) != len(names):
            raise ds.DatasetError(f"columns {raw_names} are not distinct once made identifiers "
                                  f"({names}); give distinct names with columns=[...]")
        label = sanitize(self.options.label)
        if label not in names:
            raise ds.DatasetError(f"label column {self.options.label!r} is not among the columns {raw_names}; "
                                  "pass label= one of them (or columns=[...] for a file without header)")
        return names, label

    def _left_out(self, names: list[str], raw_names: list[str], label: str) -> dict[str, str]:
        """The columns that are not features, and why: those named in exclude=, and those the header
        gives no name (Spark calls the i-th `_c<i>`): R's row names, a pandas index, row numbers that
        a model must not learn from."""
        opts = self.options
        wanted = {sanitize(e): e for e in opts.exclude or ()}
        unknown = [e for n, e in wanted.items() if n not in names]
        if unknown:
            raise ds.DatasetError(f"exclude= names {unknown}, which are not among the columns {raw_names}")
        if label in wanted:
            raise ds.DatasetError(f"exclude= names the label column {opts.label!r}; leave it out of exclude=")
        left = {n: "excluded" for n in wanted}
        if opts.header and not opts.columns:
            left.update({n: f"the header gives column {i + 1} no name: row names or an index" for i, (n, raw) in
                         enumerate(zip(names, raw_names)) if raw == f"_c{i}" and n != label and n not in left})
        if left and len(left) >= len(names) - 1:
            raise ds.DatasetError(f"no feature column is left once {sorted(left)} are left out; "
                                  "name fewer columns in exclude=")
        return left

    def _described(self, name: str, kind: str | None = None) -> str:
        source = self.source_names.get(name, name)
        text = repr(source) if source == name else f"{source!r} (field {name!r})"
        return f"column {text}" + (f" of type {kind}" if kind else "")

    def _check_given_types(self, names: list[str], inference: Inference) -> None:
        """A column given a type by schema= whose values mostly do not parse as it fails here, with
        one of the values, before any row is rejected or dropped: the type is wrong, not the rows."""
        given = {sanitize(k) for k in self.options.schema or {}}
        for name in names:
            bad, present = inference.failures.get(name, 0), inference.present.get(name, 0)
            if name in given and bad and bad * 2 >= present:
                raise ds.DatasetError(
                    f"{bad} of the {present} values of {self._described(name, inference.types[name])} "
                    f"(given by schema=) do not parse as {inference.types[name]}, e.g. "
                    f"{inference.samples.get(name)!r}; give the column another type in schema= "
                    "(or 'string' for categories), or fix the values")

    def _first_rejected(self, stage: ds.DatasetDir, limit: int = 3) -> str:
        lines: list[str] = []
        for rel in sorted(self.storage.ls(stage.rejected)):
            for line in self.storage.read_text(rel).splitlines():
                row = json.loads(line)
                lines.append(f"  {row.get('line') or row.get('fields')!s}: {row.get('reason')}")
                if len(lines) >= limit:
                    return "\n".join(lines)
        return "\n".join(lines)

    def _worst_column(self, inference: Inference) -> str:
        """The column whose values failed to parse most often, with one of them and its type."""
        if not any(inference.failures.values()):
            return ""
        name = max(inference.failures, key=lambda n: inference.failures[n])
        kind = inference.types[name]
        return (f"{inference.failures[name]} values of {self._described(name, kind)} do not parse as "
                f"{kind}, e.g. {inference.samples.get(name)!r}. ")

    def _run_typed(self, stage: ds.DatasetDir, read: Read, stats_mod: types.ModuleType) -> ds.DatasetSummary:
        from pyspark.sql import functions as F

        opts = self.options
        names, label, inference, parsed = read.names, read.label, read.inference, read.parsed
        self._step("reject malformed rows")
        self.storage.makedirs(stage.rejected)
        rejected_reasons: dict[str, int] = {}
        if inference.malformed or any(inference.failures.values()):   # else no row is rejected: no pass
            fields = "to_json(named_struct(" + ", ".join(f"{sql_text(n)}, {FIELDS}[{i}]" for i, n in
                                                         enumerate(read.all_names)) + "))"
            reasons = read.rejected.selectExpr(f"{REASON} AS reason", f"{sql_name(CORRUPT)} AS line",
                                               f"{fields} AS fields")
            for row in (reasons
                        .repartition(1).mapInPandas(preflight.guard(JsonLinesWriter(self.storage, stage.rejected),
                                                                    self.checks), "reason string, rows long")
                        .collect()):
                rejected_reasons[row["reason"]] = rejected_reasons.get(row["reason"], 0) + row["rows"]
        total_rejected = sum(rejected_reasons.values())
        if total_rejected == inference.read:
            raise ds.RejectedInputError(
                f"all {inference.read} rows of {redact_uri(self.src)!r} were rejected, so dataset {self.name!r} "
                f"was not written. {self._worst_column(inference)}The columns were taken to be {names}; the first "
                f"rejected rows:\n{self._first_rejected(stage)}\n{HINT}")
        if opts.strict and total_rejected:
            raise ds.RejectedInputError(
                f"{total_rejected} of {inference.read} rows were rejected and strict=True, so dataset {self.name!r} "
                f"was not written; {self._worst_column(inference)}The first:\n{self._first_rejected(stage)}\n"
                "Fix these rows, or run without --strict to keep them in _rejected")

        typed = parsed.where(F.col(REASON).isNull())
        usable = typed.where(F.col(label).isNotNull())   # the rows as written (before missing values are filled):
        features = [n for n in names if n != label]      # those of usable_sql (whose chain of 1,000 ANDs
        if opts.missing == "drop" and features:          # overflows the planner's stack)
            usable = usable.dropna(subset=features)
        return self._write(stage, usable.select(*names, SPLIT, ROW_HASH), names, label, inference,
                           rejected_reasons, stats_mod, kept=typed)

    def _emptied(self, kept: DataFrame, names: list[str], label: str, types: dict[str, str]) -> str:
        """Which column emptied the most rows (missing in them), and a text of it taken as missing:
        asked only when no row is left, so that the error can name it."""
        from pyspark.sql import functions as F

        counted = [label] + ([n for n in names if n != label] if self.options.missing == "drop" else [])
        row = one_row(kept.agg(F.count(F.lit(1)).alias("__rows"),
                       *[F.count(F.when(F.col(n).isNull(), F.lit(1))).alias(n) for n in counted]))
        name = max(counted, key=lambda n: row[n] or 0)
        if not row[name]:
            return ""
        na = sorted({v.strip() for v in self.options.na_values} | {""})
        raw = F.trim(F.col(name))
        sample = self._raw.where(F.col(CORRUPT).isNull() & (raw.isNull() | raw.isin(na))).select(
            F.coalesce(raw, F.lit("")).alias("v")).first()
        shown = f", e.g. the text {sample['v']!r}" if sample is not None else ""
        return (f"{self._described(name, types[name])} is missing in {row[name]} of {row['__rows']} rows"
                f"{shown} (empty or one of na_values). ")

    def _fit(self, aggregates: dict[str, dict[str, Any]], value_counts: dict[tuple[str, str], dict[str, int]],
             numeric: list[str], indexed: list[str], types: dict[str, str]
             ) -> tuple[dict[str, float], dict[str, float], dict[str, Any], dict[str, list[str]]]:
        """Means, standard deviations (of the filled values under missing='fill'), fill values and
        category lists of the train split, from what the statistics collected: no pass of its own."""
        opts = self.options
        train = aggregates.get("train", {})
        means: dict[str, float] = {}
        stds: dict[str, float] = {}
        fills: dict[str, Any] = {}
        for n in numeric:
            mean = train.get(f"{n}__mean")
            means[n] = float(mean) if mean is not None else 0.0
        if opts.missing == "fill":
            fills = {n: means[n] for n in numeric}
        total = int(train.get("__rows") or 0)
        for n in numeric:   # as an imputer followed by a scaler: spread of the (filled) train split
            present = int(train.get(f"{n}__count") or 0)
            sample_std = train.get(f"{n}__std")
            sample_std = float(sample_std) if sample_std is not None and math.isfinite(sample_std) else 0.0
            squares = sample_std ** 2 * (present - 1) if present > 1 else 0.0
            fill = fills.get(n)
            if fill is not None and types[n] in INTEGRAL_TYPES:
                fill = float(int(round(fill)))
            missing = total - present if fill is not None else 0
            if present + missing == 0:
                stds[n] = 1.0
                continue
            centre = (present * means[n] + missing * (fill or 0.0)) / (present + missing)
            squares += present * (means[n] - centre) ** 2 + missing * ((fill or 0.0) - centre) ** 2
            std = math.sqrt(max(squares, 0.0) / (present + missing))
            stds[n] = std if std > 1e-12 * max(1.0, abs(means[n])) else 1.0
        categories = {n: [v for v, _ in sorted(value_counts.get(("train", n), {}).items(),
                                               key=lambda kv: (-kv[1], kv[0]))] for n in indexed}
        return means, stds, fills, categories

    def _write(self, stage: ds.DatasetDir, usable: Any, names: list[str], label: str,
               inference: Inference, rejected_reasons: dict[str, int], stats_mod: types.ModuleType,
               kept: Any) -> ds.DatasetSummary:
        opts = self.options
        types, read = inference.types, inference.read
        features = [n for n in names if n != label]
        numeric = [n for n in features if types[n] != "string"]
        categorical = [n for n in features if types[n] == "string"]
        label_numeric = types[label] != "string"

        self._step("statistics")
        summarized = summarized_columns(names, label, types)
        stats, aggregates, value_counts = self._statistics(   # the rest: by the writers
            usable, summarized, categorical + ([] if label_numeric else [label]), inference)
        stats["rejected"] = rejected_reasons
        stats["types"] = types
        for column in stats["columns"]:   # the header's own words, beside the field name
            column["source_name"] = self.source_names.get(column["name"], column["name"])
        counts = {split_name: int(stats["rows"].get(split_name, 0)) for split_name in SPLITS}
        written = sum(counts.values())
        if written == 0:
            raise ds.DatasetError(f"none of the {read} rows of {redact_uri(self.src)!r} is left to write: every "
                                  "row without a label or (with missing='drop') with a missing value was dropped. "
                                  f"{self._emptied(kept, names, label, types)}Pass missing='fill' (--missing "
                                  "fill), or check na_values and the label column")

        self._step("fit the transform")
        indexed = categorical + ([] if label_numeric else [label])
        means, stds, fills, categories = self._fit(aggregates, value_counts, numeric, indexed, types)
        if opts.missing == "fill":
            fills.update({n: categories[n][0] for n in categorical if categories[n]})

        # the transform's outputs; the shard writers apply it to the typed rows (see Transform)
        feature_names: list[str] = []
        fields: dict[str, dict[str, Any]] = {}
        for n in features:
            if n in numeric:
                feature_names.append(n)
                fields[n] = {"dtype": "float64", "shape": []}
            elif opts.one_hot:
                for i, _ in enumerate(categories[n]):
                    feature_names.append(f"{n}_{i}")
                    fields[f"{n}_{i}"] = {"dtype": "float32", "shape": []}
            else:
                feature_names.append(n)
                fields[n] = {"dtype": "int32", "shape": []}
        label_kind = ("long" if types[label] in INTEGRAL_TYPES else "double") if label_numeric else "index"
        fields["label"] = {"dtype": {"long": "int64", "double": "float64", "index": "int32"}[label_kind], "shape": []}
        fields["features"] = {"dtype": "float32", "shape": [len(feature_names)]}
        for name, spec in fields.items():
            spec["tfrecord"] = name
        transform_rows = Transform(
            features=features, label=label, label_kind=label_kind, one_hot=opts.one_hot,
            scale={n: ((means[n], stds[n]) if opts.standardize else None) for n in numeric},
            categories={n: categories[n] for n in indexed}, dtypes={n: spec["dtype"] for n, spec in fields.items()},
            fills={n: (int(round(v)) if types[n] in INTEGRAL_TYPES else v) for n, v in fills.items()})
        edges = {column["name"]: next((entry["histogram"]["edges"] for entry in column["splits"].values()
                                       if "histogram" in entry), None)
                 for column in stats["columns"] if column["name"] in summarized}

        self._step("write shards")
        splits_meta, shard_count, sketches = self._write_shards(
            stage, usable, counts, transform_rows, edges, stats_mod.median_fraction(written, len(summarized)))
        stats_mod.add_sketches(stats, sketches)
        shard_count = max(shard_count, 0)
        rejected = sum(rejected_reasons.values())
        dropped = read - written - rejected
        self._step("finish")
        transform = {"label": {"column": label, "source_name": opts.label, "type": types[label],
                               "classes": None if label_numeric else categories[label]},
                     "columns": [{"name": n, "type": types[n], "source_name": self.source_names.get(n, n)}
                                 for n in names],
                     "numeric": {n: {"mean": means[n], "std": stds[n], "standardized": opts.standardize}
                                 for n in numeric},
                     "categorical": {n: {"categories": categories[n], "unknown_index": UNKNOWN,
                                         "one_hot": opts.one_hot} for n in categorical},
                     "missing": {"policy": opts.missing, "fill": fills, "na_values": list(opts.na_values)},
                     "features": feature_names, "left_out": self._left_out_sources()}
        self.storage.write_json(stage.transform, transform)
        if not label_numeric:
            self.storage.write_json(stage.labels, {"labels": categories[label]})
        self.storage.write_json(stage.stats_json, stats)
        self.storage.write_text(stage.stats_html, stats_mod.render_html(stats, title=self.name))
        Manifest(
            kind="table", name=self.name, source=redact_uri(self.src),
            options={k: v for k, v in opts.__dict__.items() if k != "extra"},
            fields=fields, default_fields=["features", "label"], label_field="label",
            labels=None if label_numeric else categories[label], splits=splits_meta,
            counts={"read": read, "written": written, "rejected": rejected, "dropped": dropped},
            rejected_reasons=rejected_reasons).write(self.storage, stage.manifest)
        return ds.DatasetSummary(name=self.name, kind="table", uri="", read=read, written=written,
                                 rejected=rejected, dropped=dropped, splits=counts, shards=shard_count,
                                 rejected_reasons=rejected_reasons, left_out=self._left_out_sources(),
                                 engine=self.engine)

    def _statistics(self, usable: Any, numeric: list[str], categorical: list[str], inference: Inference
                    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[tuple[str, str], dict[str, int]]]:
        """The statistics of the rows to write, with their aggregates and category counts (for the fit)."""
        from hopsml.data import stats

        return stats.table_stats_and_counts(usable, SPLIT, SPLITS, numeric, categorical,
                                            aggregated=inference.aggregated)

    def _left_out_sources(self) -> dict[str, str]:
        """The columns left out by their header text (none for a nameless one, which Spark calls _c<i>)."""
        return {"" if why.startswith("the header gives") else self.source_names.get(n, n): why
                for n, why in self.left_out.items()}

    def _write_shards(self, stage: ds.DatasetDir, usable: Any, counts: dict[str, int],
                      transform: Transform, edges: Mapping[str, list[float] | None], sampled: float
                      ) -> tuple[dict[str, Any], int, dict[tuple[str, str], Any]]:
        """Both splits' Parquet files and TFRecord shards in one Spark job: each row gets its split's
        shard number (a hash of the row), and each task transforms and writes the shards whose rows it
        holds, sketching the numeric columns on the way (:class:`~hopsml.data.stats.NumericSketch`: their
        histograms over ``edges``, distinct values and the ``sampled`` share of rows for the medians). The
        typed rows cross the shuffle, not the transformed ones and their feature vector."""
        from hopsml.data import stats

        wanted_default = self.options.shards or max(self.settings.num_workers, self._parallelism())
        wanted = {s: max(1, min(wanted_default, rows)) for s, rows in counts.items() if rows}
        writer = TableShardWriter(self.storage, stage, wanted, self.options.compression, transform, edges,
                                  stats.values_kept(len(edges)))
        for split_name in wanted:
            self.storage.makedirs(stage.parquet(split_name))
        shipped: dict[str, int] = {}
        sketches: dict[tuple[str, str], Any] = {}
        for row in self._run_writers(usable, wanted, transform, writer, sampled):
            shipped[row["split"]] = shipped.get(row["split"], 0) + row["rows"]
            for column, sketch in pickle.loads(zlib.decompress(row["sketches"])).items():
                if (row["split"], column) in sketches:
                    sketches[(row["split"], column)].merge(sketch)
                else:
                    sketches[(row["split"], column)] = sketch
        splits_meta = {}
        for split_name, count in wanted.items():
            if shipped.get(split_name, 0) != counts[split_name]:
                raise ds.DatasetError(f"split {split_name!r}: the tasks wrote {shipped.get(split_name, 0)} rows "
                                      f"of {counts[split_name]}; rerun the job")
            fill_missing_shards(self.storage, stage.tfrecord(split_name), count, self.options.compression)
            splits_meta[split_name] = {"rows": counts[split_name], "parquet": f"{layout.DATASET_PARQUET}/{split_name}",
                                       "tfrecord": f"{layout.DATASET_TFRECORD}/{split_name}", "shards": count}
        return splits_meta, max(wanted.values(), default=0), sketches

    def _parallelism(self) -> int:
        """Spark's default parallelism: with the workers, the default number of shards of a split."""
        return int(self.handle.default_parallelism)

    def _run_writers(self, usable: DataFrame, wanted: Mapping[str, int], transform: Transform,
                     writer: TableShardWriter, sampled: float) -> list[Any]:
        """The writer tasks' rows (split, rows, sketches): each row goes to its split's shard (the high bits
        of its hash), and a task writes the shards whose rows it holds."""
        from pyspark.sql import functions as F

        row_hash = F.shiftright(F.col(ROW_HASH), 32)   # bits the split (the hash's low digits) does not decide
        shard = F.lit(0)
        for split_name, count in wanted.items():
            shard = F.when(F.col(SPLIT) == split_name, F.pmod(row_hash, F.lit(count))).otherwise(shard)
        # the median sample: rows by bits of their hash that neither the split nor the shard reads
        in_sample = (F.lit(True) if sampled >= 1.0 else
                     F.pmod(F.shiftright(F.col(ROW_HASH), 12), F.lit(1 << 20)) < F.lit(int(sampled * (1 << 20))))
        keyed = usable.select(*transform.inputs(), F.col(SPLIT), shard.cast("int").alias(SHARD),
                              in_sample.alias(SAMPLED))
        return (keyed.repartition(sum(wanted.values()), SPLIT, SHARD)
                .mapInArrow(preflight.guard(writer, self.checks), "split string, rows long, sketches binary")
                .collect())
