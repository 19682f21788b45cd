"""The streaming app's engine: its Spark configuration (from settings), scheduler pools, and per-batch accounting.

Pools (Spark's FAIR scheduler, ``fairscheduler.xml`` written beside ``spark-defaults.conf``): a job of the
``hot`` pool is given the cores before a job of ``cdc`` or ``archive`` whenever both wait (weight and
``minShare``), so an archive write never holds a hot commit back. Spark assigns the pool per thread (a local
property), and a Python thread does not inherit its parent's: every thread that runs a batch's Spark work calls
:meth:`BatchJobs.enter` first.

Accounting: every Spark job of a batch carries the batch's job tag (``<query>:<batch id>``), so the app can
report how many jobs a batch ran (:meth:`BatchJobs.jobs`, from Spark's status tracker) beside the Delta commits
it made (:meth:`BatchJobs.committed`), and ``lake bench`` prints both per batch kind.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs.files import write_atomic
from spark_jobs.settings import Settings

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Pool -> (weight, minShare in cores). The hot path first, CDC next, the archive appends with what is left.
POOLS: dict[str, tuple[int, int]] = {"hot": (8, 1), "cdc": (4, 1), "archive": (1, 0)}
HOT, CDC, ARCHIVE = "hot", "cdc", "archive"


def fair_scheduler_xml() -> str:
    pools = "\n".join(f'  <pool name="{name}">\n    <schedulingMode>FIFO</schedulingMode>\n'
                      f"    <weight>{weight}</weight>\n    <minShare>{share}</minShare>\n  </pool>"
                      for name, (weight, share) in POOLS.items())
    return f'<?xml version="1.0"?>\n<allocations>\n{pools}\n</allocations>\n'


def write_fair_scheduler(settings: Settings) -> Path:
    """The pools file (no secrets) beside ``spark-defaults.conf``; returns its path."""
    from spark_jobs.session import spark_conf_dir

    path = spark_conf_dir(settings) / "fairscheduler.xml"
    text = fair_scheduler_xml()
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(path, text)
    return path


def stream_conf(settings: Settings) -> dict[str, str]:
    """Spark properties of the streaming app's driver, all from settings (docs/configuration.md)."""
    from spark_jobs.session import AUTO_COMPACT_OFF

    conf = {
        "spark.driver.memory": settings.stream_driver_memory,
        # A JVM out of heap can leave a batch waiting forever on a lost task result (seen: the task-result
        # thread died, the query hung): exit instead, so the supervisor restarts the app and the log says why.
        "spark.driver.extraJavaOptions": " ".join(["-XX:+ExitOnOutOfMemoryError", *settings.stream_java_options.split()]),
        "spark.sql.shuffle.partitions": str(max(1, settings.spark_shuffle_partitions)),
        "spark.scheduler.mode": "FAIR",
        "spark.scheduler.allocation.file": str(write_fair_scheduler(settings)),
        # MERGE sources are checkpointed by the app (silver.cdc.apply_changes): no second materialisation.
        "spark.databricks.delta.merge.materializeSource": "none",
        # A batch's cache (events: the read, checked and de-duplicated batch; CDC: the raw and parsed records) is
        # written once and read two or three times, within seconds: its columnar compression statistics (a hash
        # lookup per string value) were 12.4 % of the events query's executor samples, 2.7 % without (JFR); no
        # wall-time gain was shown on two cores (docs/benchmarks.md, 2026-12-02).
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        # Timestamps as Parquet INT64 microseconds, not Spark's default INT96 (deprecated by Parquet): an INT96 value
        # goes through a fixed-length binary dictionary, part of the 4.8 % of executor samples in Parquet dictionary
        # lookups (JFR). Readers see the same Delta type (timestamp); delta-rs writes INT64 microseconds already.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        # The stream compacts on a schedule (table_io.maintenance.Maintenance, LAKE_STREAM_COMPACT_MINUTES), not in
        # its writes: Delta's auto compaction compacted 2-4 files after nearly every batch here (measured). The
        # tables keep the property (contracts.tables.AUTO_COMPACT) for any other Spark writer.
        **AUTO_COMPACT_OFF,
        # OPTIMIZE compacts files under half the target into files of about the target. Delta's defaults (1 GB for
        # both) made every scheduled run re-pack the day's bronze and silver.events files (450-680 MB each by the
        # afternoon) with the few new ones: 80-140 s per run, every 10 minutes (docs/benchmarks.md, 2026-12-02).
        "spark.databricks.delta.optimize.maxFileSize": str(settings.stream_compact_file_mb * 1024 * 1024),
        "spark.databricks.delta.optimize.minFileSize": str(settings.stream_compact_file_mb * 1024 * 1024 // 2),
        # Offsets, commits and state files of every micro-batch written in place on S3A (an abortable stream),
        # not written aside and renamed (a copy and a delete per file on S3); spark-hadoop-cloud, infra/jvm/spark.
        "spark.sql.streaming.checkpointFileManagerClass":
            "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager",
    }
    if settings.stream_default_parallelism > 0:
        conf["spark.default.parallelism"] = str(settings.stream_default_parallelism)
    return conf


def codegen_compiles(spark: SparkSession) -> int:
    """How many times this JVM's Spark has compiled generated code so far (Spark's ``CodegenMetrics``): a plan whose
    generated Java text changes every batch (a per-batch value written into it as a constant) compiles again every
    batch, and its new classes run interpreted until the JIT catches up; ``LAKE_STREAM_LOG_JOBS=true`` logs the
    count per batch."""
    jvm = spark._jvm
    assert jvm is not None
    return int(jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount())


class BatchJobs:
    """The Spark jobs and Delta commits of one micro-batch of ``query``, run in scheduler pool ``pool``."""

    def __init__(self, spark: SparkSession, query: str, batch_id: int, pool: str) -> None:
        self.spark = spark
        self.group = f"{query}:{batch_id}"
        self.pool = pool
        self._commits = 0
        self._lock = threading.Lock()
        self._compiles_at_start = codegen_compiles(spark)

    def enter(self, pool: str | None = None) -> None:
        """Tag the calling thread's Spark jobs with this batch (and run them in ``pool``, default the batch's).

        A job tag, not a job group: the streaming query's thread keeps the group Spark gave it (``query.stop()``
        cancels the running batch's jobs through it)."""
        sc = self.spark.sparkContext
        sc.setLocalProperty("spark.scheduler.pool", pool or self.pool)
        sc.addJobTag(self.group)

    def leave(self) -> None:
        """Untag the calling thread (the query's own thread runs every batch)."""
        self.spark.sparkContext.removeJobTag(self.group)

    def wrap(self, fn: Any, pool: str | None = None) -> Any:
        """``fn`` run in another thread with this batch's tags."""
        def run(*args: Any, **kwargs: Any) -> Any:
            self.enter(pool)
            return fn(*args, **kwargs)
        return run

    def committed(self, n: int = 1) -> None:
        with self._lock:
            self._commits += n

    @property
    def commits(self) -> int:
        return self._commits

    def jobs(self) -> int:
        """Spark jobs this batch ran so far (Spark's status tracker keeps the recent ones: ``spark.ui.retainedJobs``)."""
        sc = self.spark.sparkContext._jsc.sc()  # pyspark's tracker has no by-tag lookup; the JVM's has
        return len(sc.statusTracker().getJobIdsForTag(self.group))

    def job_names(self) -> dict[str, int]:
        """What this batch's jobs were (their description where Spark or Delta set one, else their call site) and
        how many of each: ``LAKE_STREAM_LOG_JOBS=true`` logs it per batch, to see which commands a batch issues."""
        sc = self.spark.sparkContext._jsc.sc()
        store = sc.statusStore()  # private[spark] in Scala, public in the bytecode
        names: dict[str, int] = {}
        for job_id in sc.statusTracker().getJobIdsForTag(self.group):
            from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

            try:
                job = store.job(job_id)
            except Py4JJavaError:  # evicted from the store (spark.ui.retainedJobs): not counted by name
                names["(evicted)"] = names.get("(evicted)", 0) + 1
                continue
            desc = job.description()
            name = str(desc.get()) if desc.isDefined() else str(job.name())
            name = name.split("\n")[0][:120]
            names[name] = names.get(name, 0) + 1
        return names

    def log(self) -> None:
        """Log this batch's jobs by name and its stages with their times (``LAKE_STREAM_LOG_JOBS=true``)."""
        log.info("lake stream: %s jobs: %s; classes compiled since the batch started (whole JVM): %d", self.group,
                 self.job_names(), codegen_compiles(self.spark) - self._compiles_at_start)
        log.info("lake stream: %s stages (name, tasks, wall s, task s): %s", self.group, self.stage_seconds())

    def stage_seconds(self) -> list[tuple[str, int, float, float]]:
        """Every stage of this batch's jobs: (name, tasks, wall seconds, task seconds summed), in stage order;
        logged with the job names (``LAKE_STREAM_LOG_JOBS=true``) to see where a batch's time goes."""
        sc = self.spark.sparkContext._jsc.sc()
        store = sc.statusStore()
        out: list[tuple[int, str, int, float, float]] = []
        for job_id in sc.statusTracker().getJobIdsForTag(self.group):
            from py4j.protocol import Py4JJavaError

            try:
                ids = store.job(job_id).stageIds()
                for i in range(ids.size()):
                    stage = store.lastStageAttempt(ids.apply(i))
                    sub, done = stage.submissionTime(), stage.completionTime()
                    wall = ((done.get().getTime() - sub.get().getTime()) / 1000
                            if sub.isDefined() and done.isDefined() else 0.0)
                    out.append((int(stage.stageId()), str(stage.name())[:60], int(stage.numTasks()), wall,
                                int(stage.executorRunTime()) / 1000))
            except Py4JJavaError:  # evicted from the store or skipped: not listed
                continue
        return [(name, tasks, round(wall, 3), round(run, 3)) for _id, name, tasks, wall, run in sorted(out)]
