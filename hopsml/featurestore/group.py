"""A feature group, as the hopsworks SDK has one: a name and version, a primary key and an event time, its
features with descriptions, and its rows in a Delta table with every insert kept as a commit.

A group from `get_or_create_feature_group` is saved by its first insert (or `save()`): then its schema is
fixed, and later inserts must agree with it (a new nullable column is allowed and recorded in the commit).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from hopsml import execution_notes, layout
from hopsml.errors import FeatureStoreError
from hopsml.featurestore import expectations, frames, online_sync, spark_insert, spark_online, stats
from hopsml.featurestore.hsfs_members import GroupMembers
from hopsml.featurestore.query import Feature, Query
from hopsml.featurestore.refs import Condition, StoreRef
from hopsml.featurestore.seams import Frame, When
from hopsml.featurestore.table import Commit, GroupTable

if TYPE_CHECKING:
    import datetime as dt

    import pyarrow as pa
    from pyspark.sql import DataFrame as SparkFrame

log = logging.getLogger(__name__)

_UNSUPPORTED_WRITE = {"start_offline_materialization": "offline materialization jobs (hopsml writes the offline "
                      "table in the insert itself)", "kafka": "Kafka streaming inserts"}


class FeatureGroup(GroupMembers):
    """One version of a feature group (see the module docstring)."""

    store: StoreRef   # its FeatureStore

    def __init__(self, store: StoreRef, name: str, version: int, *, description: str = "",
                 primary_key: Sequence[str] = (), event_time: str | None = None,
                 partition_key: Sequence[str] = (), online_enabled: bool = False,
                 statistics_config: object = None, features: Sequence[dict[str, Any]] = (),
                 created: str | None = None, expectation_suite: object = None, ttl: dt.timedelta | float | None = None,
                 online_synced: str | None = None) -> None:
        self.store, self.name, self.version = store, layout.validate_name(name, "feature group name"), int(version)
        self.description = description or ""
        self.primary_key = [k.lower() for k in primary_key]
        self.event_time = event_time.lower() if event_time else None
        self.partition_key = [k.lower() for k in partition_key]
        self.online_enabled = bool(online_enabled)
        self.statistics_config = stats.config_of(statistics_config)
        self._features = [dict(f) for f in features]
        self.created = created
        self.expectation_suite = expectations.suite_of(expectation_suite)
        self.ttl = ttl_seconds(ttl, self.key)
        self.online_synced = online_synced   # when `sync_online` last rewrote the online rows
        self.table = GroupTable(store.table_location(self.name, self.version), self.keys(), self.key,
                                self.partition_key)

    # --- identity and metadata -------------------------------------------------------------------------
    @property
    def key(self) -> str:
        return f"{self.name}_{self.version}"

    def keys(self) -> list[str]:
        """The columns an upsert matches on: the primary key and the event time."""
        return list(dict.fromkeys([*self.primary_key, *([self.event_time] if self.event_time else [])]))

    @property
    def saved(self) -> bool:
        return self.store.group_saved(self.name, self.version)

    @property
    def features(self) -> list[Feature]:
        return [Feature(f["name"], f["type"], f.get("description", ""), f["name"] in self.primary_key,
                        f["name"] == self.event_time, self.key) for f in self._features]

    def feature_names(self) -> list[str]:
        """The names of the group's features, in the table's column order."""
        return [f["name"] for f in self._features]

    def get_feature(self, name: str) -> Feature:
        """The feature `name` (case does not matter); refused, naming the features, when the group has none by it."""
        for feature in self.features:
            if feature.name == name.lower():
                return feature
        raise FeatureStoreError(f"feature group {self.key!r} has no feature {name!r}; its features: "
                                f"{', '.join(self.feature_names()) or '(none yet: insert first)'}")

    def __getitem__(self, name: str) -> Feature:
        return self.get_feature(name)

    def __getattr__(self, name: str) -> Feature:
        if name.startswith("_") or name in ("store", "table"):
            raise AttributeError(name)
        try:
            return self.get_feature(name)
        except FeatureStoreError as missing:
            raise AttributeError(str(missing)) from None

    def to_dict(self) -> dict[str, Any]:
        """The group's definition as its record keeps it."""
        return {"name": self.name, "version": self.version, "description": self.description,
                "primary_key": self.primary_key, "event_time": self.event_time,
                "partition_key": self.partition_key, "online_enabled": self.online_enabled,
                "statistics_config": self.statistics_config, "features": self._features, "created": self.created,
                "expectation_suite": self.expectation_suite.to_dict() if self.expectation_suite else None,
                "ttl": self.ttl, "online_synced": self.online_synced}

    def __repr__(self) -> str:
        return f"FeatureGroup({self.name!r}, {self.version}, primary_key={self.primary_key}, " \
               f"event_time={self.event_time!r})"

    def update_feature_description(self, feature_name: str, description: str) -> FeatureGroup:
        """Set one feature's description and save the group's definition."""
        name = self.get_feature(feature_name).name
        for f in self._features:
            if f["name"] == name:
                f["description"] = description
        self.store.save_group(self)
        return self

    def update_description(self, description: str) -> FeatureGroup:
        """Set the group's description (saved at once when the group is)."""
        self.description = description
        if self.saved:
            self.store.save_group(self)
        return self

    def update_statistics_config(self) -> FeatureGroup:
        """Save the group's `statistics_config` as set on the object."""
        self.statistics_config = stats.config_of(self.statistics_config)
        self.store.save_group(self)
        return self

    # --- expectations -----------------------------------------------------------------------------------
    def save_expectation_suite(self, expectation_suite: object, run_validation: bool = True,
                               validation_ingestion_policy: str = "STRICT", overwrite: bool = False) -> Any:
        """Check every later insert against `expectation_suite` (see expectations.py); "STRICT" refuses a failing
        batch, "ALWAYS" commits it and warns."""
        if self.expectation_suite is not None and not overwrite and self.saved:
            raise FeatureStoreError(f"feature group {self.key!r} has an expectation suite already; pass "
                                    "overwrite=True to replace it")
        self.expectation_suite = expectations.suite_of(expectation_suite, validation_ingestion_policy)
        if self.expectation_suite is not None:
            self.expectation_suite.run_validation = run_validation
        if self.saved:
            self.store.save_group(self)
        return self.expectation_suite

    def get_expectation_suite(self) -> Any:
        """The suite every insert is checked against, None without one."""
        return self.expectation_suite

    def delete_expectation_suite(self) -> None:
        """Stop checking inserts: the group keeps no expectation suite."""
        self.expectation_suite = None
        if self.saved:
            self.store.save_group(self)

    def validate(self, dataframe: Frame, save_report: bool = False, **_: object) -> dict[str, Any]:
        """The group's expectation suite checked on `dataframe` (nothing is inserted)."""
        if self.expectation_suite is None:
            raise FeatureStoreError(f"feature group {self.key!r} has no expectation suite: save_expectation_suite "
                                    "first")
        report = expectations.validate(self.expectation_suite, frames.lower_names(frames.to_arrow(dataframe)))
        if save_report:
            self.store.save_validation(self, report)
        return report

    # --- writing --------------------------------------------------------------------------------------
    def save(self, features: Frame | None = None, write_options: dict[str, Any] | None = None,
             validation_options: dict[str, Any] | None = None, wait: bool = False) -> Any:
        """Save the group, with `features` as its first rows when given (a DataFrame), else empty."""
        if features is not None:
            return self.insert(features, write_options=write_options, wait=wait)
        if not self.saved:
            self.store.save_group(self)
        return self

    def insert(self, features: Frame, overwrite: bool = False, operation: str = "upsert", storage: str | None = None,
               write_options: dict[str, Any] | None = None, validation_options: dict[str, Any] | None = None,
               wait: bool = False, **_: object) -> tuple[None, dict[str, Any] | None]:
        """Insert a batch of rows as one commit: new (primary key, event time) pairs are history, existing ones
        are updated (an upsert). With an expectation suite the batch is validated first (validation_options=
        {"run_validation": False} skips it). Returns (job, validation report) as Hopsworks does (no job here)."""
        for option in write_options or {}:
            if option in _UNSUPPORTED_WRITE:
                raise FeatureStoreError(f"write option {option!r}: hopsml has no {_UNSUPPORTED_WRITE[option]}")
        if storage not in (None, "online", "offline"):
            raise FeatureStoreError(f"storage={storage!r}: 'online', 'offline' or None (both)")
        if storage == "online":
            self._insert_online(features, frames.duplicates_policy(write_options, self.key))
            return None, None
        if operation not in ("upsert", "insert"):
            raise FeatureStoreError(f"operation {operation!r}: hopsml inserts with 'upsert' (or 'insert')")
        if overwrite:
            raise FeatureStoreError("overwrite=True would drop the group's history; create a new version instead")
        run_validation = bool((validation_options or {}).get("run_validation", True))
        duplicates = frames.duplicates_policy(write_options, self.key)
        if spark_insert.is_spark(features):
            if not self.table.remote:
                return None, self.commit_spark(features, validate=run_validation, duplicates=duplicates,
                                               online=storage != "offline")[1]
            log.info("feature group %s lives under a remote root: the Spark batch is committed from the driver",
                     self.key)
        return None, self.commit(frames.to_arrow(features), validate=run_validation, duplicates=duplicates,
                                 online=storage != "offline")[1]

    def _insert_online(self, features: Frame, duplicates: str) -> None:
        """storage='online': the batch into the online store only (as hsfs writes it), checked as an insert is;
        the offline table is not changed."""
        if not self.online_enabled:
            raise FeatureStoreError(f"feature group {self.key!r} is not online enabled: storage='online' writes "
                                    "only the online store (create the group with online_enabled=True)")
        self._need_primary_key()
        batch = frames.check_batch(frames.lower_names(frames.to_arrow(features)), self.primary_key, self.event_time,
                                   self.key, duplicates)
        if self.event_time:
            batch = frames.event_times(batch, self.event_time)
        batch, _ = frames.conform(batch, self.table.schema(), self.key)
        self.store.online().write(self, batch)

    def commit(self, batch: pa.Table, validate: bool = True, duplicates: str = frames.KEEP_LAST,
               online: bool = True) -> tuple[Commit, dict[str, Any] | None]:
        """Check, validate and commit one batch: the commit and the validation report (None without a suite)."""
        batch = frames.lower_names(batch)
        self._need_primary_key()
        batch = frames.check_batch(batch, self.primary_key, self.event_time, self.key, duplicates)
        if not self.table.exists():
            frames.check_partition_key(batch, self.partition_key, self.key)
        if self.event_time:
            batch = frames.event_times(batch, self.event_time)
        batch, added = frames.conform(batch, self.table.schema(), self.key)
        report = self._validated(batch) if validate else None
        with self.store.group_lock(self):
            owed = self._owe_online() if self.online_enabled and online else None
            commit = self.table.commit(batch, added)
            with self.store.after_commit(self, commit, "saving the group's definition"):   # logged, never raised
                self._committed(commit, batch.schema)
            if owed is not None:   # under the lock: same-key writes reach the online store in commit order
                with self.store.after_commit(self, commit, "the online write"):
                    self._write_online(lambda: self.store.online().write(self, batch), commit, owed)
        if self.statistics_config["enabled"]:   # of the table after the commit: the batch itself after the first
            with self.store.after_commit(self, commit, "statistics"):
                after = batch if commit.version == 0 else self.table.read(commit.version)
                self.store.save_statistics(self, commit, stats.of_table(after, self.statistics_config))
        return commit, report

    def commit_spark(self, frame: SparkFrame, validate: bool = True, duplicates: str = frames.KEEP_LAST,
                     online: bool = True) -> tuple[Commit, dict[str, Any] | None]:
        """A Spark DataFrame's rows committed by Spark's tasks (spark_insert.py); its checks and statistics are
        Spark jobs. Only an expectation suite reads the batch on the driver (the checks run on Arrow)."""
        self._need_primary_key()
        frame, schema, added = spark_insert.prepared(frame, self.primary_key, self.event_time, self.partition_key,
                                                     self.table.schema(), self.key, duplicates)
        report = self._validated(frame.toArrow() if hasattr(frame, "toArrow") else frames.to_arrow(frame.toPandas())
                                 ) if validate and self._validating else None
        with self.store.group_lock(self):
            owed = self._owe_online() if self.online_enabled and online else None
            commit = spark_insert.write(self.table, frame, schema, added)
            with self.store.after_commit(self, commit, "saving the group's definition"):   # logged, never raised
                self._committed(commit, schema)
            if owed is not None:   # written by the tasks, or streamed through the driver (spark_online.py)
                with self.store.after_commit(self, commit, "the online write"):
                    self._write_online(lambda: spark_online.write(self.store.online(), self, frame, schema,
                                                                  self.store.settings.online_batch_rows).rows,
                                       commit, owed)
        if self.statistics_config["enabled"]:
            with self.store.after_commit(self, commit, "statistics"):
                after = self.table.spark(frame.sparkSession, commit.version)
                self.store.save_statistics(self, commit, spark_insert.statistics(after, self.statistics_config))
        return commit, report

    def _owe_online(self) -> dict[str, Any]:
        """Before an offline commit (under the group's lock): record that the online write is owed. Returns what
        an earlier insert still owed ({} when nothing was)."""
        latest = self.table.latest_version() if self.table.exists() else -1
        return self.store.owe_online(self, latest + 1) or {}

    def _write_online(self, write: Callable[[], int], commit: Commit, owed: dict[str, Any]) -> None:
        """The batch's newest row per key into the online store (`write` does it), after its offline commit (under
        the group's lock); when an earlier insert's online write never happened (`owed`), the whole online side is
        rewritten from the offline table instead. A failure leaves the write owed, for the next insert or `hopsml fs
        sync`."""
        from hopsml.featurestore.online import store_errors

        failures: tuple[type[BaseException], ...] = (FeatureStoreError, *store_errors())
        try:
            if owed:
                log.warning("feature group %s: the online side missed commits since %s (an insert was interrupted "
                            "or its online write failed); rewriting it from the offline table", self.key,
                            owed.get("since_commit"))
                self._sync_online_locked()
            else:
                write()
                self.store.paid_online(self)
        except failures as error:
            raise FeatureStoreError(f"feature group {self.key!r}: the offline table holds the batch (commit "
                                    f"{commit.version}), but the online store did not take it ({error}); the online "
                                    "side has the rows of earlier inserts, and the next insert or "
                                    f"`hopsml fs sync {self.name} {self.version}` completes it") from None

    def online_behind(self) -> dict[str, Any] | None:
        """None when the online store holds the newest row per key of every commit; else what is owed (from
        which commit, since when): an insert was killed between its offline commit and its online write, or
        that write failed. The next insert or `sync_online()` completes it."""
        return self.store.online_owed(self, fresh=True) if self.online_enabled else None

    def sync_online(self) -> int:
        """Make the online store hold the newest row per key of the offline table (what `hopsml fs sync` does
        after an online write failed or was cut off, or after enabling the online side); the rows written."""
        if not self.online_enabled:
            raise FeatureStoreError(f"feature group {self.key!r} is not online enabled (online_enabled=True "
                                    "when it is created)")
        self._check_saved()
        with self.store.group_lock(self):
            return self._sync_online_locked()

    def _sync_online_locked(self) -> int:
        """The online table rebuilt from the offline one, streamed (online_sync.py): the rows written."""
        import datetime as dt

        done = online_sync.rebuild(self, self.store.settings.online_batch_rows)
        log.info("feature group %s: the online table rebuilt with %d rows, the newest per key (%d pieces of at most "
                 "%d rows)", self.key, done.rows, done.pieces, done.largest)
        written = done.rows
        self.online_synced = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        self.store.save_group(self)
        self.store.paid_online(self)
        return written

    def _need_primary_key(self) -> None:
        if not self.primary_key:
            raise FeatureStoreError(f"feature group {self.key!r} has no primary key: create it with "
                                    "primary_key=[...] naming the column(s) that identify an entity")

    @property
    def _validating(self) -> bool:
        return self.expectation_suite is not None and bool(self.expectation_suite.run_validation)

    def _committed(self, commit: Commit, schema: pa.Schema) -> None:
        """After a commit, under the group's lock: the group's features and definition saved."""
        self._features = _features_of(schema, self._features)
        if self.created is None:
            self.created = commit.committed_on.isoformat()
        self.store.save_group(self)
        execution_notes.note("featuregroup", name=self.name, version=self.version, commit=commit.version)

    def _validated(self, batch: pa.Table) -> dict[str, Any] | None:
        """The batch checked against the group's expectation suite: the report (None without one); a STRICT
        suite refuses a failing batch, an ALWAYS one warns."""
        report = None
        if self._validating:
            assert self.expectation_suite is not None
            report = expectations.validate(self.expectation_suite, batch)
            strict = self.expectation_suite.validation_ingestion_policy == "STRICT"
            report["ingestion_result"] = "INGESTED" if report["success"] or not strict else "REJECTED"
            where = self.store.save_validation(self, report)
            if not report["success"] and strict:
                raise FeatureStoreError(f"feature group {self.key!r} refused the batch: it fails its expectation "
                                        f"suite {self.expectation_suite.name!r}: {expectations.failures(report)} "
                                        f"(the report: {where}; policy STRICT, 'ALWAYS' would insert and warn)")
            if not report["success"]:
                log.warning("feature group %s: the batch fails expectations (inserted, policy ALWAYS): %s",
                            self.key, expectations.failures(report))
        return report

    # --- reading --------------------------------------------------------------------------------------
    def select_all(self, include_primary_key: bool = True, include_event_time: bool = True,
                   include_foreign_key: bool = True, include_partition_key: bool = True) -> Query:
        """Every feature; without the primary key or event time when asked (hopsml keeps no foreign keys, and a
        partition key is a feature like the others: their flags are accepted)."""
        names = [n for n in self.feature_names() if (include_primary_key or n not in self.primary_key)
                 and (include_event_time or n != self.event_time)]
        return Query(self, tuple(names))

    def select(self, features: Sequence[str | Feature] | str | Feature) -> Query:
        """These features of the group (one may be given alone, as hsfs takes `select('cc_num')`)."""
        listed = [features] if isinstance(features, (str, Feature)) else list(features)
        names = [(f.name if isinstance(f, Feature) else str(f)).lower() for f in listed]
        for name in names:
            self.get_feature(name)
        return Query(self, tuple(dict.fromkeys(names)))

    def select_except(self, features: Sequence[str | Feature] | str = ()) -> Query:
        """Every feature but `features` (one name may be given as a string). As in hsfs, a name the group does not
        have leaves nothing out; it is logged, since it is most likely a typo."""
        listed = [features] if isinstance(features, (str, Feature)) else list(features)
        left_out = {(f.name if isinstance(f, Feature) else str(f)).lower() for f in listed}
        unknown = sorted(left_out - set(self.feature_names()))
        if unknown:
            log.warning("feature group %s: select_except(%s) names no feature of it (it has %s)", self.key,
                        ", ".join(map(repr, unknown)), ", ".join(self.feature_names()))
        return Query(self, tuple(n for n in self.feature_names() if n not in left_out))

    def select_features(self) -> Query:
        """Every feature but the primary key, event time and partition key."""
        kept = {*self.primary_key, *self.partition_key, *([self.event_time] if self.event_time else [])}
        return Query(self, tuple(n for n in self.feature_names() if n not in kept))

    def filter(self, f: Condition) -> Query:   # f: hsfs' name
        """A query of every feature, filtered by `f` (a condition such as `fg.amount > 10`)."""
        return self.select_all().filter(f)

    def as_of(self, wallclock_time: When = None, exclude_until: When = None) -> Query:
        """A query of every feature as of `wallclock_time` (rows committed after `exclude_until` only, when given)."""
        return self.select_all().as_of(wallclock_time, exclude_until)

    def read(self, wallclock_time: When = None, online: bool = False, dataframe_type: str = "default",
             read_options: dict[str, Any] | None = None) -> Any:
        """The group's rows (as of `wallclock_time`: the newest commit at or before it); with `online`, the
        online store's rows (its newest per key), as hsfs reads them."""
        self._check_saved()
        if online:
            if wallclock_time is not None:
                raise FeatureStoreError(f"feature group {self.key!r}: the online store holds only the newest row per "
                                        "key; read(wallclock_time=...) reads the offline table as it was")
            return self.select_all().read(True, dataframe_type, read_options)
        return self.select_all().as_of(wallclock_time).read(online, dataframe_type, read_options)

    def show(self, n: int, online: bool = False) -> Any:
        """The first `n` rows of the group (of its online rows with `online`), as a pandas frame."""
        return self.read(online=online).head(n)

    def commit_details(self, wallclock_time: When = None, limit: int | None = None) -> dict[int, dict[str, Any]]:
        """Each commit (newest first) with its time and row counts; up to `wallclock_time` when given."""
        self._check_saved()
        commits = self.table.commits()
        if wallclock_time is not None:
            from hopsml.featurestore.table import wallclock_ms

            at = wallclock_ms(wallclock_time)
            commits = [c for c in commits if c.committed_ms <= at]
        return {c.version: c.details() for c in commits[:limit]}

    def get_statistics(self, computation_time: When = None) -> dict[str, Any]:
        """The statistics of the newest commit (at or before `computation_time` when given)."""
        self._check_saved()
        version = self.table.version_at(computation_time) if computation_time is not None else None
        return self.store.read_statistics(self, version)

    def compute_statistics(self, wallclock_time: When = None) -> dict[str, Any]:
        """Compute and keep the statistics of the newest commit (at or before `wallclock_time`), whatever
        statistics_config says; the statistics."""
        self._check_saved()
        version = (self.table.version_at(wallclock_time) if wallclock_time is not None
                   else self.table.latest_version())
        commit = next(c for c in self.table.commits() if c.version == version)
        computed = stats.of_table(self.table.read(version), {**self.statistics_config, "enabled": True})
        self.store.save_statistics(self, commit, computed)
        return computed

    def delete(self) -> None:
        """Delete the group version: its table, records and online rows."""
        self.store.delete_group(self)

    def _check_saved(self) -> None:
        if not self.table.exists():
            raise FeatureStoreError(f"feature group {self.key!r} has no data yet: insert a DataFrame first")


def ttl_seconds(ttl: object, group: str) -> float | None:
    """A staleness window in seconds (a timedelta or a number of seconds; None: no window): how old a row of
    this group may be, against the label row's event time, to be joined point in time (Feast's `ttl`)."""
    import datetime as dt

    if ttl is None:
        return None
    seconds = ttl.total_seconds() if isinstance(ttl, dt.timedelta) else ttl
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
        raise FeatureStoreError(f"feature group {group!r}: ttl={ttl!r} is not a staleness window: give a positive "
                                "datetime.timedelta or a number of seconds (None: no window)")
    return float(seconds)


def _features_of(schema: pa.Schema, old: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The features of `schema`, keeping the descriptions already given."""
    described = {f["name"]: f.get("description", "") for f in old}
    return [{"name": field.name, "type": str(field.type), "description": described.get(field.name, "")}
            for field in schema]
