"""The online store: the newest row per primary key of each online-enabled feature group, which feature vectors
are read from at serving time. One interface, two stores: SQLite (embedded, the default: one file in the project's
feature store, no server) and MySQL/MariaDB (networked, which several serving hosts share; RonDB, Hopsworks' own
online store, speaks the same protocol). The `online_store` setting chooses.

Each group version is one table `<project>__<name>_<version>` keyed by the group's primary key, holding its
features and the event time (epoch microseconds). A write keeps the row with the later event time, so an older
backfill never overwrites a newer value; the same event time again is an update, as offline. Every write runs
that one statement, made by `prepare` into a `Target`: `write` (a batch in memory, one transaction; `replace`
makes the table exactly the batch's newest rows), `write_stream` (rows arriving in pieces: a Spark task's, see
spark_online.py, or a sync's staging table, see online_sync.py) and `swap` (a staging table made the table at
once). Credentials come from the setting and appear in no record, log or error (errors show the URL without them).

Reads at serving time go through a `Reader`: the table's columns are looked up once, its SQL made once per number
of keys and its values' conversions chosen once, so a lookup is one statement. A write, drop or statement made
here starts a new generation, which tells the readers of this process to look again; a table dropped or changed
elsewhere shows as an error of the statement, after which a reader is made anew.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from hopsml.errors import FeatureStoreError
from hopsml.featurestore.seams import KeyedGroup
from hopsml.redact import redact_uri

if TYPE_CHECKING:
    import pyarrow as pa

    from hopsml import config
    from hopsml.fs import Storage

EVENT_US = "__event_us"    # the event time as epoch microseconds: what a write compares
ONLINE_FILE = "_online.sqlite"
STAGING = "__staging"      # a table's rows being rebuilt by a sync, swapped in when complete
RETIRED = "__retired"      # a table's old rows between a MySQL swap and their drop
_BATCH = 1000              # rows per statement


class Cursor(Protocol):
    """A DB-API cursor (sqlite3's, PyMySQL's, mysqlclient's): what the stores call on one."""

    def execute(self, operation: str, parameters: Sequence[object] = ..., /) -> object: ...

    def executemany(self, operation: str, rows: Iterable[Sequence[object]], /) -> object: ...

    def fetchall(self) -> Sequence[Sequence[Any]]: ...

    def fetchone(self) -> Sequence[Any] | None: ...

    def close(self) -> None: ...


class Connection(Protocol):
    """A DB-API connection, as the stores use one."""

    def cursor(self) -> Cursor: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def close(self) -> None: ...


class OnlineStore:
    """One online store (see the module docstring); `dialect` says how its SQL differs."""

    dialect = ""

    def __init__(self, url: str) -> None:
        self.url = url
        self._local = threading.local()
        self.generation = 0     # readers made before a write, drop or statement here look the table up again

    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact_uri(self.url)!r})"

    # --- what the dialects differ in --------------------------------------------------------------------
    def _connect(self) -> Any:
        raise NotImplementedError

    def _mark(self) -> str:
        return "?"

    def _column_type(self, kind: pa.DataType, key: bool) -> str:
        raise NotImplementedError

    def _upsert(self, table: str, columns: Sequence[str], keys: Sequence[str], timed: bool) -> str:
        raise NotImplementedError

    def _tables(self, cursor: Cursor) -> set[str]:
        raise NotImplementedError

    def _columns(self, cursor: Cursor, table: str) -> list[str]:
        raise NotImplementedError

    def _q(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def _begin(self, connection: Connection) -> None:
        """Open the transaction a write commits (sqlite3 opens one itself before the first change)."""

    # --- connections ------------------------------------------------------------------------------------
    def connection(self) -> Connection:
        """This thread's connection (a serving answers from several threads)."""
        found = getattr(self._local, "connection", None)
        if found is None:
            try:
                found = self._connect()
            except store_errors() as error:   # name the store without its credentials
                raise FeatureStoreError(f"cannot reach the online store {redact_uri(self.url)}: "
                                        f"{without_password(str(error), self.url)}") from None
            self._local.connection = found
        return found

    def close(self) -> None:
        found = getattr(self._local, "connection", None)
        if found is not None:
            found.close()
            self._local.connection = None

    # --- writing ----------------------------------------------------------------------------------------
    def write(self, group: KeyedGroup, batch: pa.Table, replace: bool = False) -> int:
        """The newest row per key of `batch` (a group's rows, offline types) written, unless the store holds a
        later one; with `replace`, the table holds exactly these rows afterwards. Returns the rows written."""
        newest = newest_per_key(batch, group.primary_key, group.event_time)
        connection = self.connection()
        self._begin(connection)
        cursor = connection.cursor()
        try:
            target = self._prepared(cursor, table_name(group), newest.schema, group.primary_key, group.event_time)
            if replace:
                cursor.execute(f"DELETE FROM {self._q(target.table)}")
            written = self._put(cursor, target, newest)
            connection.commit()
        except Exception:
            connection.rollback()
            raise
        finally:
            cursor.close()
            self.generation += 1
        return written

    def prepare(self, table: str, schema: pa.Schema, keys: Sequence[str], event_time: str | None) -> Target:
        """`table` made ready for rows of `schema` (created, or given the new columns), and what a writer of those
        rows needs (picklable, so a Spark task takes it along): what the streamed writes start with."""
        connection = self.connection()
        cursor = connection.cursor()
        try:
            target = self._prepared(cursor, table, schema, keys, event_time)
            connection.commit()
        finally:
            cursor.close()
            self.generation += 1
        return target

    def _prepared(self, cursor: Cursor, table: str, schema: pa.Schema, keys: Sequence[str], event_time: str | None
                  ) -> Target:
        self._ensure(cursor, table, schema, list(keys), bool(event_time))
        columns = [*schema.names, *([EVENT_US] if event_time else [])]
        return Target(self.url, table, tuple(keys), event_time, tuple(schema.names),
                      self._upsert(table, columns, list(keys), bool(event_time)))

    def _put(self, cursor: Cursor, target: Target, rows: pa.Table) -> int:
        """`rows` (one per key, the columns of `target`) upserted with the target's newest-row-wins statement: the
        one statement every write path runs."""
        values = stored_rows(rows.select(list(target.columns)), target.event_time)
        for start in range(0, len(values), _BATCH):
            cursor.executemany(target.sql, values[start:start + _BATCH])
        return len(values)

    def write_stream(self, target: Target, batches: Iterable[pa.Table | pa.RecordBatch], batch_rows: int, *,
                     one_transaction: bool, observe: Callable[[int], None] | None = None) -> Streamed:
        """Rows arriving in `batches` written to `target` a piece of at most `batch_rows` rows at a time (the newest
        per key of each piece, as `write` takes a batch; across pieces the statement keeps the newer row), so no
        more than one piece is held as Python values. `one_transaction`: all or nothing (readers see the rows
        once all are in), else each piece is committed as it is written. `observe` is called with each piece's
        rows, before it is written."""
        import pyarrow as pa

        if batch_rows < 1:
            raise FeatureStoreError(f"online_batch_rows={batch_rows}: give a positive number of rows")
        done = Streamed()
        connection = self.connection()
        self._begin(connection)
        cursor = connection.cursor()
        try:
            for batch in batches:
                table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
                for start in range(0, table.num_rows, batch_rows):
                    piece = table.slice(start, batch_rows)
                    if observe is not None:
                        observe(piece.num_rows)
                    done.add(self._put(cursor, target, newest_per_key(piece, target.keys, target.event_time)),
                             piece.num_rows)
                    if not one_transaction:
                        connection.commit()
                        self._begin(connection)
            connection.commit()
        except BaseException:
            connection.rollback()
            raise
        finally:
            cursor.close()
            self.generation += 1
        return done

    def swap(self, staging: str, table: str) -> None:
        """`staging` becomes `table` at once (its old rows dropped): a reader sees the old table or the new one,
        never a half-written one."""
        connection = self.connection()
        cursor = connection.cursor()
        try:
            self._swap(connection, cursor, staging, table)
        except Exception:
            connection.rollback()
            raise
        finally:
            cursor.close()
            self.generation += 1

    def _swap(self, connection: Connection, cursor: Cursor, staging: str, table: str) -> None:
        raise NotImplementedError

    def drop_table(self, table: str) -> None:
        """`table` dropped where it exists (a staging table an interrupted sync left)."""
        connection = self.connection()
        cursor = connection.cursor()
        try:
            if table in self._tables(cursor):
                cursor.execute(f"DROP TABLE {self._q(table)}")
            connection.commit()
        finally:
            cursor.close()
            self.generation += 1

    def _ensure(self, cursor: Cursor, table: str, schema: pa.Schema, keys: Sequence[str], timed: bool) -> None:
        """The group's table, created or given the batch's new columns."""
        if table not in self._tables(cursor):
            columns = [f"{self._q(f.name)} {self._column_type(f.type, f.name in keys)}" for f in schema]
            if timed:
                columns.append(f"{self._q(EVENT_US)} BIGINT NOT NULL")
            cursor.execute(f"CREATE TABLE {self._q(table)} ({', '.join(columns)}, "
                           f"PRIMARY KEY ({', '.join(self._q(k) for k in keys)}))")
            return
        present = set(self._columns(cursor, table))
        for field in schema:
            if field.name not in present:
                cursor.execute(f"ALTER TABLE {self._q(table)} ADD COLUMN {self._q(field.name)} "
                               f"{self._column_type(field.type, False)}")

    # --- reading ----------------------------------------------------------------------------------------
    def read(self, group: KeyedGroup, keys: Sequence[Sequence[Any]], schema: pa.Schema
             ) -> dict[tuple[Any, ...], dict[str, Any]]:
        """The stored rows of the given primary-key values (a tuple per key, in the group's key order), by key;
        values in the offline types of `schema`. A key with no row is left out."""
        names = [f.name for f in schema]
        return {key: dict(zip(names, values)) for key, values in self.reader(group, schema)(keys).items()}

    def reader(self, group: KeyedGroup, schema: pa.Schema, names: Sequence[str] | None = None) -> Reader:
        """A reader of the group's table as it is now: the values of `names` (default: all of `schema`) by key."""
        table = table_name(group)
        cursor = self.connection().cursor()
        try:
            present = self._columns(cursor, table) if table in self._tables(cursor) else None
        finally:
            cursor.close()
        return Reader(self, table, list(group.primary_key), schema,
                      [f.name for f in schema] if names is None else list(names), present)

    def rows(self, group: KeyedGroup, schema: pa.Schema) -> pa.Table:
        """Every row the group's table holds (its newest per key), in the offline types of `schema`; no rows when
        it has no table yet. What `fg.read(online=True)` answers."""
        import pyarrow as pa

        table = table_name(group)
        cursor = self.connection().cursor()
        try:
            if table not in self._tables(cursor):
                return schema.empty_table()
            present = set(self._columns(cursor, table))
            names = [f.name for f in schema if f.name in present]
            cursor.execute(f"SELECT {', '.join(self._q(n) for n in names)} FROM {self._q(table)}")
            fetched = cursor.fetchall()
        finally:
            cursor.close()
        columns = []
        for at, name in enumerate(names):
            load = _loader(schema.field(name).type)
            values = [row[at] for row in fetched]
            if load is not None:
                values = [None if v is None else load(v) for v in values]
            columns.append(pa.array(values, schema.field(name).type))
        return pa.table(columns, schema=pa.schema([schema.field(n) for n in names]))

    def count(self, group: KeyedGroup) -> int | None:
        """Rows in the group's table (None: it has none yet)."""
        table = table_name(group)
        cursor = self.connection().cursor()
        try:
            if table not in self._tables(cursor):
                return None
            cursor.execute(f"SELECT COUNT(*) FROM {self._q(table)}")
            return int(cursor.fetchall()[0][0])
        finally:
            cursor.close()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run one statement and commit it (what tests do behind the store's back)."""
        connection = self.connection()
        cursor = connection.cursor()
        try:
            cursor.execute(sql, list(params))
            connection.commit()
        finally:
            cursor.close()
            self.generation += 1

    def drop(self, group: KeyedGroup) -> None:
        self.drop_table(table_name(group))


class Reader:
    """Rows by primary key from one group's table as it was when made (see the module docstring): `reader(keys)`
    gives, for each key that has a row, the values of `names` in the offline types of the schema, a name the table
    lacks as None. `complete` says the table has every one of them (a reader worth keeping)."""

    def __init__(self, store: OnlineStore, table: str, keys: Sequence[str], schema: pa.Schema, names: Sequence[str],
                 present: Sequence[str] | None) -> None:
        self.store, self.table, self.generation = store, table, store.generation
        self.exists = present is not None
        there = set(present or ())
        self.complete = self.exists and all(n in there for n in names)
        wanted = [n for n in dict.fromkeys(names) if n in there]
        selected = [*wanted, *[k for k in keys if k not in wanted]]
        types = {f.name: f.type for f in schema}
        self._selected = selected
        self._loads = [(i, load) for i, load in enumerate(_loader(types[n]) if n in types else None for n in selected)
                       if load is not None]
        at = {n: i for i, n in enumerate(selected)}
        self._picks = [at.get(n, -1) for n in names]
        self._width = len(names)
        self._direct = self._picks == list(range(len(names)))   # the names lead the selected columns, in order
        self._keys = [at[k] for k in keys]
        plain = all(k in types and _plain_key(types[k]) for k in keys)   # a loaded key is as_stored already
        self._key = self._keys[0] if plain and len(keys) == 1 else None
        self._plain = plain
        self._statements: dict[int, str] = {}

    def current(self) -> bool:
        """Made since the store's last write, drop or statement in this process."""
        return self.generation == self.store.generation

    def __call__(self, keys: Sequence[Sequence[Any]]) -> dict[tuple[Any, ...], Sequence[Any]]:
        out: dict[tuple[Any, ...], Sequence[Any]] = {}
        if not self.exists:
            return out
        loads, picks, width, direct, one = self._loads, self._picks, self._width, self._direct, self._key
        cursor = self.store.connection().cursor()
        try:
            for start in range(0, len(keys), _BATCH):
                chunk = keys[start:start + _BATCH]
                cursor.execute(self._statement(len(chunk)),
                               [v if type(v) in _AS_STORED else as_stored(v) for key in chunk for v in key])
                for row in cursor.fetchall():
                    if loads:
                        row = list(row)
                        for i, load in loads:
                            if row[i] is not None:
                                row[i] = load(row[i])
                    key = (row[one],) if one is not None else self._key_of(row)
                    out[key] = row[:width] if direct else tuple(row[i] if i >= 0 else None for i in picks)
            return out
        finally:
            cursor.close()

    def _key_of(self, row: Sequence[Any]) -> tuple[Any, ...]:
        if self._plain:
            return tuple(row[i] for i in self._keys)
        return tuple(as_stored(row[i]) for i in self._keys)

    def _statement(self, count: int) -> str:
        found = self._statements.get(count)
        if found is None:
            store, keys = self.store, [self._selected[i] for i in self._keys]
            if len(keys) == 1:
                where = f"{store._q(keys[0])} IN ({', '.join([store._mark()] * count)})"
            else:
                one = "(" + " AND ".join(f"{store._q(k)} = {store._mark()}" for k in keys) + ")"
                where = " OR ".join([one] * count)
            found = f"SELECT {', '.join(store._q(n) for n in self._selected)} FROM {store._q(self.table)} WHERE {where}"
            self._statements[count] = found
        return found


_AS_STORED = (int, str, float)   # types as_stored gives back as they are


class SQLiteStore(OnlineStore):
    """The embedded store: one SQLite file (WAL, so readers never wait for a writer)."""

    dialect = "sqlite"

    def __init__(self, url: str, path: str) -> None:
        super().__init__(url)
        self.path = path

    def _connect(self) -> Any:
        import sqlite3

        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        return connection

    def _column_type(self, kind: pa.DataType, key: bool) -> str:
        import pyarrow as pa

        if pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_timestamp(kind):
            return "INTEGER"
        if pa.types.is_floating(kind):
            return "REAL"
        return "TEXT"

    def _upsert(self, table: str, columns: Sequence[str], keys: Sequence[str], timed: bool) -> str:
        names = ", ".join(self._q(c) for c in columns)
        changed = ", ".join(f"{self._q(c)} = excluded.{self._q(c)}" for c in columns if c not in keys)
        newer = f" WHERE excluded.{self._q(EVENT_US)} >= {self._q(table)}.{self._q(EVENT_US)}" if timed else ""
        action = f"DO UPDATE SET {changed}{newer}" if changed else "DO NOTHING"
        return (f"INSERT INTO {self._q(table)} ({names}) VALUES ({', '.join('?' * len(columns))}) "
                f"ON CONFLICT ({', '.join(self._q(k) for k in keys)}) {action}")

    def _swap(self, connection: Connection, cursor: Cursor, staging: str, table: str) -> None:
        # one transaction (sqlite3 opens none before DDL by itself): a WAL reader keeps the snapshot it began with
        cursor.execute("BEGIN IMMEDIATE")
        cursor.execute(f"DROP TABLE IF EXISTS {self._q(table)}")
        cursor.execute(f"ALTER TABLE {self._q(staging)} RENAME TO {self._q(table)}")
        connection.commit()

    def _tables(self, cursor: Cursor) -> set[str]:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {row[0] for row in cursor.fetchall()}

    def _columns(self, cursor: Cursor, table: str) -> list[str]:
        cursor.execute(f"PRAGMA table_info({self._q(table)})")
        return [row[1] for row in cursor.fetchall()]


class MySQLStore(OnlineStore):
    """A MySQL, MariaDB or RonDB server, for stores several hosts share. The driver is mysqlclient (C, about
    half PyMySQL's time per lookup) where it is installed, else PyMySQL (pure Python, installs anywhere);
    `?driver=pymysql` in the URL chooses, `?unix_socket=/path` talks over the server's socket on its own host."""

    dialect = "mysql"

    def _connect(self) -> Any:
        import urllib.parse

        parts = urllib.parse.urlsplit(self.url)
        options = dict(urllib.parse.parse_qsl(parts.query))
        driver = mysql_driver(options.get("driver"))
        where = {"unix_socket": options["unix_socket"]} if options.get("unix_socket") else \
            {"host": parts.hostname or "127.0.0.1", "port": parts.port or 3306}
        return driver.connect(**where, user=urllib.parse.unquote(parts.username or "root"),
                              password=urllib.parse.unquote(parts.password or ""),
                              database=parts.path.lstrip("/") or "", connect_timeout=10, read_timeout=60,
                              write_timeout=60, autocommit=True, charset="utf8mb4")

    def _begin(self, connection: Any) -> None:   # PyMySQL's or mysqlclient's: `query` is beyond DB-API
        # reads run outside transactions (autocommit), so each sees the rows committed before it: a read inside
        # one would see only what was there at its first read, whatever other hosts wrote since
        connection.query("START TRANSACTION")

    def _mark(self) -> str:
        return "%s"

    def _q(self, name: str) -> str:
        return "`" + name.replace("`", "``") + "`"

    def _column_type(self, kind: pa.DataType, key: bool) -> str:
        import pyarrow as pa

        if pa.types.is_integer(kind) or pa.types.is_timestamp(kind):
            return "BIGINT"
        if pa.types.is_boolean(kind):
            return "TINYINT"
        if pa.types.is_floating(kind):
            return "DOUBLE"
        return f"VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {self._collation}" if key else "TEXT"

    _collation = ""

    def _ensure(self, cursor: Cursor, table: str, schema: pa.Schema, keys: Sequence[str], timed: bool) -> None:
        # a text key compares byte for byte, trailing spaces included: the default collation finds 'A' for 'a',
        # a binary one with PAD SPACE 'a ' for 'a'. MariaDB calls the one with neither utf8mb4_nopad_bin, MySQL
        # 8 utf8mb4_0900_bin; a server with neither keeps utf8mb4_bin (trailing spaces then ignored)
        if not self._collation:
            cursor.execute("SHOW COLLATION WHERE Collation IN ('utf8mb4_nopad_bin', 'utf8mb4_0900_bin')")
            found = sorted(row[0] for row in cursor.fetchall())
            self._collation = found[-1] if found else "utf8mb4_bin"
        super()._ensure(cursor, table, schema, keys, timed)

    def _upsert(self, table: str, columns: Sequence[str], keys: Sequence[str], timed: bool) -> str:
        names = ", ".join(self._q(c) for c in columns)
        event = self._q(EVENT_US)
        # MySQL assigns left to right, each seeing the ones before: the event time is compared, so set last
        changed = [c for c in columns if c not in keys and c != EVENT_US] + ([EVENT_US] if timed else [])
        if timed:
            sets = ", ".join(f"{self._q(c)} = IF(VALUES({event}) >= {event}, VALUES({self._q(c)}), {self._q(c)})"
                             for c in changed)
        else:
            sets = ", ".join(f"{self._q(c)} = VALUES({self._q(c)})" for c in changed)
        update = f" ON DUPLICATE KEY UPDATE {sets}" if sets else \
            f" ON DUPLICATE KEY UPDATE {self._q(keys[0])} = {self._q(keys[0])}"
        return f"INSERT INTO {self._q(table)} ({names}) VALUES ({', '.join(['%s'] * len(columns))}){update}"

    def _swap(self, connection: Connection, cursor: Cursor, staging: str, table: str) -> None:
        # one RENAME TABLE of both is atomic: a reader waits for it and then reads the new table
        old = table + RETIRED
        cursor.execute(f"DROP TABLE IF EXISTS {self._q(old)}")
        if table in self._tables(cursor):
            cursor.execute(f"RENAME TABLE {self._q(table)} TO {self._q(old)}, {self._q(staging)} TO {self._q(table)}")
            cursor.execute(f"DROP TABLE {self._q(old)}")
        else:
            cursor.execute(f"RENAME TABLE {self._q(staging)} TO {self._q(table)}")

    def _tables(self, cursor: Cursor) -> set[str]:
        cursor.execute("SHOW TABLES")
        return {row[0] for row in cursor.fetchall()}

    def _columns(self, cursor: Cursor, table: str) -> list[str]:
        cursor.execute(f"SHOW COLUMNS FROM {self._q(table)}")
        return [row[0] for row in cursor.fetchall()]


def mysql_driver(name: str | None = None) -> Any:
    """The MySQL driver module: `name` ('mysqlclient' or 'pymysql'), else mysqlclient where installed."""
    modules = {"mysqlclient": "MySQLdb", "pymysql": "pymysql"}
    if name is not None and name not in modules:
        raise FeatureStoreError(f"online store driver {name!r}: 'mysqlclient' or 'pymysql'")
    for module in [modules[name]] if name else modules.values():
        try:
            return importlib.import_module(module)
        except ImportError:
            continue
    raise FeatureStoreError(f"a mysql:// online store needs {name or 'PyMySQL'}: pip install pymysql "
                            "(or mysqlclient, faster, where a C compiler and libmariadb-dev are at hand)")


def store_errors() -> tuple[type[BaseException], ...]:
    """What a store's driver raises (DB-API errors of sqlite3, mysqlclient and PyMySQL; network errors)."""
    import sqlite3

    errors: list[type[BaseException]] = [sqlite3.Error, OSError]
    for module in ("pymysql", "MySQLdb"):
        try:
            errors.append(importlib.import_module(module).Error)
        except ImportError:
            pass
    return tuple(errors)


@dataclass(frozen=True)
class Target:
    """A table made ready for a write (`OnlineStore.prepare`): the store's URL, the table, its primary key, the
    event time (None: none), the columns given and the newest-row-wins statement that writes them. Picklable, so
    a Spark task writes with the statement the driver made."""

    url: str
    table: str
    keys: tuple[str, ...]
    event_time: str | None
    columns: tuple[str, ...]
    sql: str


@dataclass
class Streamed:
    """What a streamed write did: the rows written (the newest per key of each piece), the rows it was given, the
    pieces, and the most rows one piece held (what bounds the memory of the process that wrote it)."""

    rows: int = 0
    given: int = 0
    pieces: int = 0
    largest: int = 0

    def add(self, written: int, given: int) -> None:
        self.rows += written
        self.given += given
        self.pieces += 1
        self.largest = max(self.largest, given)

    def merge(self, other: Streamed) -> None:
        self.rows += other.rows
        self.given += other.given
        self.pieces += other.pieces
        self.largest = max(self.largest, other.largest)


_OPEN: dict[tuple[str, str], OnlineStore] = {}
_OPEN_LOCK = threading.Lock()


def open_store(settings: config.Settings, storage: Storage) -> OnlineStore:
    """The project's online store, as the `online_store` setting names it (one per process and URL)."""
    from hopsml import layout

    url = settings.online_store
    if not url:
        local = storage.local_path(layout.join(layout.feature_store_dir(settings.project), ONLINE_FILE))
        if local is None:
            raise FeatureStoreError("online-enabled feature groups under a remote root need an online_store setting: "
                                    "mysql://user:password@host:3306/database (shared by the serving hosts) or "
                                    "sqlite:///path/online.db")
        url = f"sqlite:///{local}"
    with _OPEN_LOCK:
        found = _OPEN.get((settings.project, url))
        if found is None:
            found = _OPEN[(settings.project, url)] = store_for(url)
        return found


def store_for(url: str) -> OnlineStore:
    """A store object for `url`, not connected yet: the one `open_store` keeps per process, and the one a Spark
    task makes for itself."""
    if url.startswith("sqlite://"):
        return SQLiteStore(url, url[len("sqlite://"):])
    return MySQLStore(url)


def newest_per_key(table: pa.Table, keys: Sequence[str], event_time: str | None) -> pa.Table:
    """One row per key: the one with the latest event time (the last given when times tie or there are none)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return table
    order = pa.array(range(table.num_rows), pa.int64())
    indexed = table.append_column("__row", order)
    sort = [(event_time, "descending")] if event_time else []
    ranked = indexed.sort_by([*sort, ("__row", "descending")])
    first = ranked.group_by(list(keys), use_threads=False).aggregate([("__row", "first")])
    kept = pc.is_in(ranked.column("__row"), value_set=first.column("__row_first"))
    return ranked.filter(kept).drop_columns(["__row"])


def read_query(query: Any, dataframe_type: str = "default") -> Any:   # a Query: query.py calls this
    """A query's rows from the online store (`read(online=True)`): the selected features of its group's online
    rows, the newest per key. A query with joins or filters is refused: its online answer is the view's feature
    vectors (`fv.get_feature_vectors`)."""
    group = query.left
    if query.joins or query.filters or query.wallclock is not None:
        raise FeatureStoreError(f"feature group {group.key!r}: read(online=True) reads one group's online rows; "
                                "a query with joins, filters or as_of is read offline (online=False), or as feature "
                                "vectors of a view (fv.get_feature_vectors)")
    if not group.online_enabled:
        raise FeatureStoreError(f"feature group {group.key!r} is not online enabled, so it has no online rows; "
                                "read(online=False) reads its offline table")
    schema = group.table.schema()
    if schema is None:
        raise FeatureStoreError(f"feature group {group.key!r} has no data yet: insert a DataFrame first")
    table = group.store.online().rows(group, schema).select(list(query.features))
    kind = dataframe_type.lower()
    if kind in ("default", "pandas"):
        return table.to_pandas()
    if kind == "polars":
        import polars as pl

        return pl.from_arrow(table)
    if kind in ("pyarrow", "arrow"):
        return table
    if kind in ("numpy", "python"):
        frame = table.to_pandas()
        return frame.to_numpy() if kind == "numpy" else frame.values.tolist()
    raise FeatureStoreError(f"dataframe_type {dataframe_type!r}: 'default', 'pandas', 'polars', 'pyarrow', 'numpy' "
                            "or 'python' (a Spark frame of online rows: read them offline)")


def table_name(group: KeyedGroup) -> str:
    """The group's table: `<project>__<name>_<version>`, so projects can share one database."""
    return f"{group.store.project}__{group.name}_{group.version}"


def stored_rows(table: pa.Table, event_time: str | None) -> list[tuple[Any, ...]]:
    """The rows of `table` as the store's columns hold them (`as_stored`, done by Arrow a column at a time), with
    the event time's epoch microseconds last when the group has one."""
    columns = [_stored(table.column(name)).to_pylist() for name in table.column_names]
    if event_time:
        columns.append(_stored(table.column(event_time)).to_pylist())
    return list(zip(*columns))


def _stored(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A column as `as_stored` makes its values: times as epoch microseconds (whatever their zone: Arrow holds
    UTC), dates as ISO text, booleans as 0/1; other types as they are."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_timestamp(kind):
        return pc.cast(pc.cast(column, pa.timestamp("us", kind.tz), safe=False), pa.int64())
    if pa.types.is_date(kind):
        return pc.cast(column, pa.string())
    if pa.types.is_boolean(kind):
        return pc.cast(column, pa.int64())
    return column


def _micros(value: dt.datetime) -> int:
    return int(value.timestamp() * 1_000_000) if value.tzinfo else \
        int(value.replace(tzinfo=dt.timezone.utc).timestamp() * 1_000_000)


def as_stored(value: object) -> object:
    """A value as a store column holds it: times as epoch microseconds, dates as ISO text, booleans as 0/1."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, dt.datetime):
        return _micros(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):   # a numpy scalar
        return as_stored(value.item())
    return value


def _loader(kind: pa.DataType) -> Callable[[Any], Any] | None:
    """What turns a stored (non-null) value back into the group's offline type; None: it is that already (both
    drivers give int and float for the INTEGER/BIGINT and REAL/DOUBLE columns made for integers and floats)."""
    import pyarrow as pa

    if pa.types.is_timestamp(kind):
        return _from_micros
    if pa.types.is_date(kind):
        return _from_iso
    if pa.types.is_boolean(kind):
        return bool
    return None


def _from_micros(value: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(int(value) / 1_000_000, dt.timezone.utc)


def _from_iso(value: object) -> dt.date:
    return dt.date.fromisoformat(str(value))


def _plain_key(kind: pa.DataType) -> bool:
    """Whether a key column's loaded value is already what `as_stored` makes of it (integers, floats, text)."""
    import pyarrow as pa

    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_string(kind)
                or pa.types.is_large_string(kind))


def without_password(text: str, url: str) -> str:
    """An error text without the URL's password (drivers may quote what they were given)."""
    import urllib.parse

    password = urllib.parse.urlsplit(url).password
    return text.replace(password, "***") if password else text
