"""Which rank a failed distributed run blames, from the reports and from Spark's own messages."""

import json
from dataclasses import dataclass

from hopsml.errors import Blame, ClusterError
from hopsml.fs import Storage
from hopsml.launcher.messages import COLLECTIVE, DIED, STUCK, Cause, RankReport
from hopsml.layout import ExperimentDir
from hopsml.runs import blame

SPARK_TASK_FAILURE = ("the Spark job 'x' failed: Job aborted due to stage failure: Task 1 in stage 3.0 failed "
                      "1 times, most recent failure: Lost task 1.0 in stage 3.0 (TID 7): Python worker exited")
SPARK_BARRIER_ABORT = ("the Spark job 'x' failed: Job aborted due to stage failure: Could not recover from a "
                       "failed barrier ResultStage. Most recent failure reason: Stage failed because barrier "
                       "task ResultTask(3, 1) finished unsuccessfully.")


@dataclass
class Run:
    """The parts of an experiment run the failure messages read: its id, folder and storage."""

    storage: Storage
    dir: ExperimentDir
    id: str = "app_1"
    logdir: str = ""


def _run(tmp_path) -> Run:
    storage = Storage(str(tmp_path))
    run_dir = ExperimentDir("Projects/p/Experiments/app_1")
    storage.write_text(run_dir.worker_log(1), "rank 1 loading\nrank 1 about to vanish\n")
    return Run(storage, run_dir)


def test_both_of_sparks_messages_name_the_dead_rank_with_its_own_lines(tmp_path):
    run = _run(tmp_path)
    for message in (SPARK_TASK_FAILURE, SPARK_BARRIER_ABORT):
        report = blame.crashed_rank(ClusterError(message), run)
        failure = blame.rank_failure([report], run)
        assert "rank 1 raised its process died" in str(failure), message
        assert "rank 1 about to vanish" in failure.output_tail


def test_the_dead_rank_comes_first_whichever_report_arrived_first(tmp_path):
    run = _run(tmp_path)
    crashed = blame.crashed_rank(ClusterError(SPARK_BARRIER_ABORT), run)
    peer = RankReport(False, rank=0, error="CollectiveError: lost the connection to rank 1 (rank 1 probably died)",
                      cause=COLLECTIVE, blamed=1, blame=DIED)
    for reports in ([peer, crashed], [crashed, peer]):
        failure = blame.rank_failure(sorted(reports, key=blame.first_cause), run)
        assert "rank 1" in str(failure) and "rank 1 about to vanish" in failure.output_tail


def test_a_stage_failure_naming_no_task_is_reported_not_raised_raw(tmp_path):
    run = _run(tmp_path)
    report = blame.crashed_rank(ClusterError("the Spark job 'x' failed: SparkContext was shut down"), run)
    assert report.rank is None
    failure = blame.rank_failure(sorted([report], key=blame.first_cause), run)
    assert "SparkContext was shut down" in str(failure) and "rank None" not in str(failure)


def _timed_out(rank: int, peer: int) -> RankReport:
    return RankReport(False, rank=rank, tail=f"rank {rank} waiting", cause=COLLECTIVE, blamed=peer, blame=STUCK,
                      error=f"CollectiveError: rank {rank} timed out during allreduce #4: rank {peer} made no "
                            "progress for 3 s; rank 1 may be hung")


def test_the_rank_that_never_reported_is_blamed_when_peers_wait_on_each_other(tmp_path):
    run = _run(tmp_path)
    run.storage.write_text(run.dir.worker_log(2), "rank 2 stuck in its data loader\n")
    # rank 0 waited on rank 1, which itself waited on rank 2; rank 2 never said a word
    failures = sorted([_timed_out(1, 2), _timed_out(0, 1)], key=blame.first_cause)
    failure = blame.rank_failure(failures, run)
    assert str(failure).startswith("experiment app_1 failed: rank 2 made no progress"), str(failure)
    assert "rank 1 saw: CollectiveError: rank 1 timed out" in str(failure)
    assert failure.output_tail == "rank 2 stuck in its data loader"
    assert failure.rank == 2 and failure.report.rank == 1 and failure.report.blamed == 2   # as data, too


def test_a_rank_own_error_is_blamed_before_a_peer_that_timed_out(tmp_path):
    run = _run(tmp_path)
    own = RankReport(False, rank=1, tail="rank 1 diverged", traceback="Traceback ...",
                     error="RuntimeError: loss is nan", cause="raised")
    failures = sorted([_timed_out(0, 1), own], key=blame.first_cause)
    failure = blame.rank_failure(failures, run)
    assert "rank 1 raised RuntimeError: loss is nan" in str(failure)
    assert failure.rank == 1 and failure.report is own


def test_a_rank_report_carries_the_blamed_peer_of_its_collective_error_as_data(tmp_path):
    from hopsml.errors import CollectiveError
    from hopsml.launcher.spec import TaskSpec
    from hopsml.launcher.task.function import run_function

    def train():
        raise CollectiveError("rank 0 timed out during allreduce #1", peer=2, kind=CollectiveError.STUCK)

    wire = json.loads(json.dumps(run_function(train, {}, TaskSpec(Storage(str(tmp_path)), "run", None, b""))))
    assert (wire["cause"], wire["blame"]) == ("collective", "stuck")   # plain text on the wire
    report = RankReport.from_wire(wire)
    assert (report.cause, report.blamed, report.blame) == (Cause.COLLECTIVE, 2, Blame.STUCK)   # members again
    assert RankReport.from_wire({**wire, "cause": "from-a-newer-version", "blame": None}).cause is None


def test_the_blame_follows_the_report_data_not_its_text(tmp_path):
    run = _run(tmp_path)
    run.storage.write_text(run.dir.worker_log(2), "rank 2 lost in its data loader\n")
    # the text names rank 1 (as a message might, of the rank it happened to wait on); the data names rank 2
    report = RankReport(False, rank=0, error="CollectiveError: rank 1 probably died", cause=COLLECTIVE,
                        blamed=2, blame=STUCK)
    failure = blame.rank_failure([report], run)
    assert str(failure).startswith("experiment app_1 failed: rank 2 made no progress"), str(failure)
    assert failure.output_tail == "rank 2 lost in its data loader"
    assert blame.retryable([report]) and not blame.retryable([RankReport(False, rank=0, cause="raised")])
