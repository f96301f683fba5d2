"""Inference logging: every predict request and its answer, appended as Parquet files under the project
(`Logs/Serving/<name>/inference/`), where hops sent them to a Kafka topic.

Off the request path: the instance's app wrapper (`LoggedApp`) only keeps the request's bytes, the answer's
bytes, the status and the latency, and puts them on a bounded queue; a writer thread of the instance turns
them into rows and writes a Parquet file when `roll_bytes` of records have gathered, every `roll_seconds`,
and when the instance stops. A full queue drops the record and counts it (in the next file's `dropped`
column and the instance's log) rather than slowing requests. Each file is written under a hidden name and
renamed, so a reader sees whole files only. An instance killed with SIGKILL loses what it had not written.

Columns: time (UTC), serving, model_name, model_version, instance, status, latency_ms, rows, request (the
body as sent, JSON text; a KServe v2 binary request's tensor bytes are put into its JSON head as each input's
`data`), inputs (what the model got after the transformer, JSON; as `request` without
one), response (JSON text), dropped (records dropped before this one), request_bytes (the body's size as sent)
and truncated (whether request, inputs or response were cut). `inference_logging` picks what is kept:
'MODEL_INPUTS' (request and inputs), 'PREDICTIONS' (response), 'ALL' (both).

A client must not fill the disk through it. A record keeps at most `max_record_bytes` of each text, and a
rejected request (4xx) only its first `REJECTED_PREFIX` bytes (its status and size say what it was); the
folder is held under `max_bytes` and `max_age_s`, each writer dropping the oldest files after it writes one,
and counting what it dropped (files, records, bytes) in `_expired-<instance>.json`, which `summary` adds up. The
folder is the serving's user's alone (0700, files 0600).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import orjson

from hopsml import layout, request_notes
from hopsml.errors import HopsmlError
from hopsml.fs import Storage
from hopsml.serving.instance.loaders import RequestError, Servable, Transformer
from hopsml.serving.instance.v2_binary import binary_inputs

if TYPE_CHECKING:
    import pyarrow as pa

    from hopsml import config
    from hopsml.serving.instance.http_server import Answer, App, Request

log = logging.getLogger(__name__)

LOG_ENV = "HOPSML_INFERENCE_LOG"
# The side records beside the Parquet files start with "_", which pyarrow's and Spark's dataset readers skip, so the
# folder reads as one dataset (`pyarrow.parquet.read_table(folder)`); logs written before kept them without it.
BATCHES_PREFIX = "_batches-"
EXPIRED_PREFIX = "_expired-"
REJECTED_PREFIX = 1024    # bytes of a rejected (4xx) request's body kept in its record
FOLDER_MODE = 0o700
FILE_MODE = 0o600
MODES = ("MODEL_INPUTS", "PREDICTIONS", "ALL")


class InferenceLogError(HopsmlError, ValueError):
    """The inference log cannot be read as asked; the message says what to do."""


@dataclass(frozen=True)
class LogOptions:
    """Where and how an instance logs; passed from `serving.start` to the instances in `LOG_ENV`."""

    folder: str
    mode: str = "ALL"
    serving: str = ""
    model_name: str = ""
    model_version: int = 0
    roll_bytes: int = 8 << 20
    roll_seconds: float = 30.0
    queue_size: int = 10000
    max_bytes: int = 1 << 30
    max_age_s: float = 7 * 86400.0
    max_record_bytes: int = 1 << 20

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, text: str) -> LogOptions:
        return cls(**json.loads(text))


@dataclass(slots=True)
class _Record:
    """What the request path keeps: raw bytes and numbers, nothing decoded."""

    time: float
    status: int
    latency_ms: float
    request: bytes
    inputs: Any
    response: bytes
    rows: int | None = None   # the rows the app read; None: counted from the JSON when written
    size: int = 0             # the request body's size as sent (`request` may be its first bytes only)
    truncated: bool = False
    version: int | None = None   # the model version that answered (a canary's); None: the serving's
    head: int = -1            # a KServe v2 binary request's JSON head length (-1: the body is all JSON)
    model: str | None = None  # on a server of several models, the name the request asked for (the serving's: its own)


_POLL_S = 0.05   # how often the writer takes the records that have come


def record(**seen: object) -> None:
    """Note, for the log's record of the request being answered, what the app read or made: its rows (the
    writer then need not parse the JSON again) and the model's inputs after the transformer (`inputs`).
    Nothing when the log is off (see hopsml.request_notes)."""
    request_notes.note(**seen)


class RecordingTransformer:
    """A transformer whose `preprocess` output is noted for the inference log; the rest is the transformer's."""

    def __init__(self, transformer: Transformer) -> None:
        self._transformer = transformer

    def preprocess(self, body: dict[str, Any]) -> dict[str, Any]:
        out = self._transformer.preprocess(body)
        record(inputs=out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transformer, name)


def _rows(inputs: object) -> int:
    shape = getattr(inputs, "shape", None)
    if shape is not None and len(shape):
        return int(shape[0])
    return len(inputs) if isinstance(inputs, list) else 1


class CountingServable:
    """The servable, with the rows of each model call counted (the serving page's batch sizes)."""

    def __init__(self, servable: Servable, counts: Counter[int]) -> None:
        self._servable = servable
        self._counts = counts

    def predict(self, inputs: object) -> Any:
        self._counts[_rows(inputs)] += 1
        return self._servable.predict(inputs)

    def call(self, prepared: object) -> Any:
        self._counts[_rows(prepared)] += 1
        return self._servable.call(prepared)

    def __getattr__(self, name: str) -> Any:   # kept once looked up: the request path asks for `prepare` each time
        value = getattr(self._servable, name)
        setattr(self, name, value)
        return value


class InferenceLogger:
    """The instance's queue and writer thread. The request path only appends to a deque: it never takes a
    lock or wakes the writer, which looks every `_POLL_S` and takes all that has come (woken per record, its
    thread switches cost an unbatched instance 0.05 ms of CPU per request, taken from its event loop)."""

    def __init__(self, options: LogOptions, instance: int, start: bool = True) -> None:
        self.options = options
        self.instance = instance
        self.records: deque[_Record] = deque()
        self.dropped = 0
        self.batch_sizes: Counter[int] = Counter()
        self.files = 0
        self.expired = {"files": 0, "records": 0, "bytes": 0}
        self._tag = f"i{instance}-p{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._stopping = threading.Event()
        private_folder(options.folder)
        self._thread = threading.Thread(target=self._run, name="inference-log", daemon=True)
        if start:
            self.start()

    def start(self) -> None:
        """Start the writer (at once unless `start=False` was given)."""
        self._thread.start()

    def put(self, record: _Record) -> None:
        """Queue a record; never blocks (a full queue drops it and counts it)."""
        if len(self.records) < self.options.queue_size:
            self.records.append(record)
            return
        self.dropped += 1
        if self.dropped in (1, 10, 100, 1000) or self.dropped % 10000 == 0:
            log.warning("inference log queue full (%d records): %d records dropped so far; the writer cannot "
                        "keep up with this request rate", self.options.queue_size, self.dropped)

    def close(self, timeout_s: float = 4.0) -> None:
        """Write what is queued and stop the writer (the instance is stopping); once is enough."""
        if not self._thread.is_alive():
            return
        self._stopping.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("inference log: the writer did not finish within %.0fs; %d records not written", timeout_s,
                        len(self.records))

    # --- the writer thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        chunks: list[pa.RecordBatch] = []   # what has come since the last file, already as Arrow columns
        rows = size = 0
        since = time.monotonic()
        written_dropped = 0

        def convert(records: list[_Record]) -> None:
            nonlocal rows
            try:
                chunks.append(self._columns(records))
                rows += len(records)
            except Exception:  # logged; the serving goes on answering
                log.exception("inference log: cannot convert %d records; they are not written", len(records))

        def roll() -> None:
            nonlocal chunks, rows, size, since, written_dropped
            if chunks:
                try:
                    self._write(chunks, self.dropped - written_dropped)
                    written_dropped = self.dropped
                except Exception:  # logged; the serving goes on answering
                    log.exception("inference log: cannot write %d records to %s", rows, self.options.folder)
            chunks, rows, size, since = [], 0, 0, time.monotonic()
            self._write_batches()
            try:
                self._retain()
            except Exception:  # logged; the serving goes on answering
                log.exception("inference log: cannot drop old files from %s", self.options.folder)

        while True:
            stop = self._stopping.wait(_POLL_S)
            taken: list[_Record] = []
            while self.records:
                item = self.records.popleft()
                taken.append(item)
                size += len(item.request) + len(item.response) + 64
                if size >= self.options.roll_bytes:
                    convert(taken)
                    taken = []
                    roll()
            if taken:   # converted now, a poll's worth at a time: the records do not pile up as Python objects
                convert(taken)
            if stop or time.monotonic() - since >= self.options.roll_seconds:
                roll()
            if stop:
                return

    def _columns(self, records: list[_Record]) -> pa.RecordBatch:
        """The records as Arrow columns (all but `dropped`, which is known when the file is written)."""
        import pyarrow as pa

        opts = self.options
        count = len(records)
        keep_inputs = opts.mode in ("MODEL_INPUTS", "ALL")
        keep_outputs = opts.mode in ("PREDICTIONS", "ALL")
        cap = opts.max_record_bytes
        requests = [_request_text(r) for r in records] if keep_inputs else None
        truncated = [r.truncated for r in records]
        if requests is not None and any(r.inputs is not None for r in records):
            made = [_json(r.inputs) if r.inputs is not None else requests[i] for i, r in enumerate(records)]
            for i, text in enumerate(made):
                if len(text) > cap:
                    made[i], truncated[i] = text[:cap], True
            inputs: list[str] | None = made
        else:
            inputs = requests
        counted = [r.rows if r.rows is not None else _request_rows(inputs[i] if inputs is not None else None)
                   for i, r in enumerate(records)]
        schema = _schema()
        request_column = pa.array(requests, pa.string()) if requests is not None else pa.nulls(count, pa.string())
        return pa.RecordBatch.from_pydict({
            "time": pa.array([int(r.time * 1e6) for r in records], pa.int64()).cast(schema["time"]),
            "serving": pa.repeat(pa.scalar(opts.serving, pa.string()), count),
            "model_name": pa.array([opts.model_name if r.model in (None, opts.serving) else r.model
                                    for r in records], pa.string()),
            "model_version": pa.array([opts.model_version if r.version is None else r.version for r in records],
                                      pa.int32()),
            "instance": pa.repeat(pa.scalar(self.instance, pa.int16()), count),
            "status": pa.array([r.status for r in records], pa.int16()),
            "latency_ms": pa.array([r.latency_ms for r in records], pa.float64()),
            "rows": pa.array(counted, pa.int32()),
            "request": request_column,
            "inputs": request_column if inputs is requests else pa.array(inputs, pa.string()),
            "response": pa.array([r.response.decode("utf-8", errors="replace") for r in records], pa.string())
            if keep_outputs else pa.nulls(count, pa.string()),
            "request_bytes": pa.array([r.size for r in records], pa.int64()),
            "truncated": pa.array(truncated, pa.bool_()),
        })

    def _write(self, chunks: list[pa.RecordBatch], dropped: int) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_batches(chunks)
        table = table.add_column(table.schema.get_field_index("response") + 1, "dropped",
                                 pa.array([dropped] + [0] * (table.num_rows - 1), pa.int64()))
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        name = f"part-{stamp}-{self._tag}-{self.files:05d}.parquet"
        tmp = os.path.join(self.options.folder, f".{name}.tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, os.path.join(self.options.folder, name))
        self.files += 1

    def _retain(self) -> None:
        """Drop the folder's oldest files (any instance's) while it is over `max_bytes` or they are older than
        `max_age_s`, and count them; another instance may drop a file first, which is then not counted here."""
        import pyarrow.parquet as pq

        opts = self.options
        found = []
        for path in files(opts.folder):
            try:
                info = os.stat(path)
            except FileNotFoundError:
                continue
            found.append((path, info.st_size, info.st_mtime))
        total, now = sum(size for _, size, _ in found), time.time()
        dropped = {"files": 0, "records": 0, "bytes": 0}
        for path, size, mtime in found:   # oldest first: names begin with the time they were written
            if total <= opts.max_bytes and now - mtime <= opts.max_age_s:
                break
            try:
                records = pq.read_metadata(path).num_rows
            except (OSError, ValueError):
                records = 0
            try:
                os.remove(path)
            except FileNotFoundError:
                total -= size
                continue
            total -= size
            dropped["files"] += 1
            dropped["records"] += records
            dropped["bytes"] += size
        if not dropped["files"]:
            return
        for key, value in dropped.items():
            self.expired[key] += value
        log.info("inference log: dropped %d old files (%d records, %d bytes) to keep %s under %d bytes and %.0f s",
                 dropped["files"], dropped["records"], dropped["bytes"], opts.folder, opts.max_bytes, opts.max_age_s)
        _write_json(os.path.join(opts.folder, f"{EXPIRED_PREFIX}{self._tag}.json"), self.expired)

    def _write_batches(self) -> None:
        """The instance's model-call sizes so far, one small JSON file per instance process."""
        if not self.batch_sizes:
            return
        _write_json(os.path.join(self.options.folder, f"{BATCHES_PREFIX}{self._tag}.json"),
                    {str(k): v for k, v in sorted(self.batch_sizes.items())})


def private_folder(folder: str) -> None:
    """Make `folder` (and what is missing above it) readable by its owner only; an existing one is narrowed."""
    os.makedirs(folder, mode=FOLDER_MODE, exist_ok=True)
    os.chmod(folder, FOLDER_MODE)


def _write_json(path: str, value: object) -> None:
    """A small JSON file written whole (under a temporary name, then renamed), readable by its owner only."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with open(fd, "w", encoding="utf-8") as out:
        json.dump(value, out)
    os.replace(tmp, path)


def _json(value: object) -> str:
    return json.dumps(value, default=_plain)


def _plain(value: object) -> Any:
    tolist = getattr(value, "tolist", None)
    if tolist is not None:
        return tolist()
    return str(value)


def _request_text(record: _Record) -> str:
    """The request as the log keeps it: its text, or for a KServe v2 binary request (a JSON head and raw tensor
    bytes) the head with each binary input's values put in as its `data`, so the log holds what the client sent
    as JSON, read as the JSON form is. A cut or malformed binary request keeps its head alone."""
    raw = record.request
    if record.head < 0 or record.head > len(raw):
        return raw.decode("utf-8", errors="replace")
    head = raw[:record.head]
    try:
        body = orjson.loads(head)
        tensors = body.get("inputs") if isinstance(body, dict) else None
        if not isinstance(tensors, list) or len(raw) < record.size:   # cut: its tensor bytes are not all here
            return head.decode("utf-8", errors="replace")
        binary_inputs(tensors, memoryview(raw)[record.head:])
        for tensor in tensors:
            parameters = tensor.get("parameters") if isinstance(tensor, dict) else None
            if isinstance(parameters, dict) and parameters.pop("binary_data_size", None) is not None and \
                    not parameters:
                del tensor["parameters"]
        return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY, default=_plain).decode()
    except (RequestError, orjson.JSONDecodeError, TypeError, AttributeError):
        return head.decode("utf-8", errors="replace")


def _request_rows(text: str | None) -> int | None:
    """Rows of a request: len(instances), or of the first column of inputs; None when it is not JSON."""
    if not text:
        return None
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    value = body.get("instances", body.get("inputs"))
    if isinstance(value, dict):
        value = next(iter(value.values()), None)
    return len(value) if isinstance(value, list) else None


class LoggedApp:
    """The instance's app (protocol.ModelApp, which notes with `record` what it read) with each POST logged:
    bytes are kept, the answer is not delayed."""

    def __init__(self, app: App, logger: InferenceLogger) -> None:
        self.app = app
        self.logger = logger

    async def handle(self, request: Request) -> Answer:
        if request.method != "POST":   # inference requests: status GETs are not
            return await self.app.handle(request)
        started = time.time()
        clock = time.perf_counter()
        with request_notes.noting() as holder:   # the app notes its rows and the model's inputs (`record`)
            status, body = await self.app.handle(request)
        limit = self.logger.options.max_record_bytes
        rejected = 400 <= status < 500   # what it was is told by its status, size and first bytes
        raw, cap = request.body, min(limit, REJECTED_PREFIX) if rejected else limit
        kept = raw if len(raw) <= cap else raw[:cap]
        answer = body if len(body) <= limit else body[:limit]
        self.logger.put(_Record(started, status, (time.perf_counter() - clock) * 1000.0, kept,
                                None if rejected else holder.get("inputs"), answer, holder.get("rows"),
                                len(raw), kept is not raw or answer is not body, holder.get("version"),
                                request.json_length, holder.get("model")))
        return status, body


# --- reading -------------------------------------------------------------------------------------------
def inference_log_path(settings: config.Settings, project: str, name: str) -> str:
    """The inference log's folder: `Logs/Serving/<name>/inference` under a local root, else under log_dir."""
    local = Storage(settings.root).local_path(layout.ServingDir.of(project, name).inference_log)
    if local is None:
        local = os.path.join(os.path.expanduser(settings.log_dir), "serving", project, name, "inference")
    return local


def files(folder: str) -> list[str]:
    """The log's finished Parquet files, oldest first."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith("part-") and n.endswith(".parquet"))
    except FileNotFoundError:
        return []
    return [os.path.join(folder, n) for n in names]


def read(folder: str, columns: list[str] | None = None) -> pa.Table:
    """Every record of the log as one Arrow table (empty, with the log's columns, when nothing is logged)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    found = files(folder)
    if not found:
        return pa.table({name: pa.array([], kind) for name, kind in _schema().items()
                         if columns is None or name in columns})
    return pa.concat_tables([pq.read_table(f, columns=columns) for f in found], promote_options="default")


def _side_records(folder: str, prefix: str) -> list[str]:
    """The names of the side records of `prefix` in the folder (also as logs before the "_" named them)."""
    return [n for n in os.listdir(folder) if n.startswith((prefix, prefix[1:])) and n.endswith(".json")]


def batch_sizes(folder: str) -> dict[int, int]:
    """Model calls per number of rows, over every instance process that wrote to the log."""
    total: Counter[int] = Counter()
    try:
        names = _side_records(folder, BATCHES_PREFIX)
    except FileNotFoundError:
        return {}
    for name in names:
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as stream:
                total.update({int(k): int(v) for k, v in json.load(stream).items()})
        except (OSError, ValueError) as exc:
            log.warning("cannot read %s: %s", name, exc)
    return dict(sorted(total.items()))


def expired_counts(folder: str) -> dict[str, int]:
    """What retention dropped from the log, over every instance process: files, records and bytes."""
    total: Counter[str] = Counter({"files": 0, "records": 0, "bytes": 0})
    try:
        names = _side_records(folder, EXPIRED_PREFIX)
    except FileNotFoundError:
        return dict(total)
    for name in names:
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as stream:
                total.update({k: int(v) for k, v in json.load(stream).items()})
        except (OSError, ValueError) as exc:
            log.warning("cannot read %s: %s", name, exc)
    return dict(total)


def summary(folder: str) -> dict[str, Any]:
    """Requests, errors, request rate, latency p50/p99 and batch sizes of the log (for status and the page)."""
    import numpy as np

    table = read(folder, ["time", "status", "latency_ms", "rows", "dropped"])
    out: dict[str, Any] = {"requests": table.num_rows, "files": len(files(folder)), "batch_sizes": batch_sizes(folder)}
    if table.num_rows == 0:
        return out
    latency = np.asarray(table.column("latency_ms").to_numpy(zero_copy_only=False), dtype=np.float64)
    status = np.asarray(table.column("status").to_numpy(zero_copy_only=False))
    times = np.asarray(table.column("time").cast("int64").to_numpy(zero_copy_only=False), dtype=np.float64) / 1e6
    span = float(times.max() - times.min())
    expired = expired_counts(folder)
    if expired["files"]:
        out["expired"] = expired
    out.update(errors=int((status >= 400).sum()), first=_iso(times.min()), last=_iso(times.max()),
               requests_per_s=float(table.num_rows / span) if span > 0 else None,
               latency_ms={"p50": float(np.percentile(latency, 50)), "p99": float(np.percentile(latency, 99)),
                           "mean": float(latency.mean())},
               dropped=int(sum(v or 0 for v in table.column("dropped").to_pylist())))
    return out


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds")


def _schema() -> Mapping[str, Any]:
    import pyarrow as pa

    return {"time": pa.timestamp("us", tz="UTC"), "serving": pa.string(), "model_name": pa.string(),
            "model_version": pa.int32(), "instance": pa.int16(), "status": pa.int16(), "latency_ms": pa.float64(),
            "rows": pa.int32(), "request": pa.string(), "inputs": pa.string(), "response": pa.string(),
            "dropped": pa.int64(), "request_bytes": pa.int64(), "truncated": pa.bool_()}
