"""Which rank a failed distributed run blames, from the reports and from Spark's own messages."""

from dataclasses import dataclass

from hopsml import experiment
from hopsml.errors import ClusterError
from hopsml.fs import Storage
from hopsml.layout import ExperimentDir

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
        report = experiment._crashed_rank(ClusterError(message), run)
        failure = experiment._rank_failure([report], run)
        assert "rank 1 raised its process died" in str(failure), message
        assert "rank 1 about to vanish" in failure.output_tail


def test_the_dead_rank_comes_first_whichever_report_arrived_first(tmp_path):
    run = _run(tmp_path)
    crashed = experiment._crashed_rank(ClusterError(SPARK_BARRIER_ABORT), run)
    peer = {"ok": False, "rank": 0, "tail": "", "traceback": "",
            "error": "CollectiveError: lost the connection to rank 1 (rank 1 probably died)"}
    for reports in ([peer, crashed], [crashed, peer]):
        failure = experiment._rank_failure(sorted(reports, key=experiment._first_cause), run)
        assert "rank 1" in str(failure) and "rank 1 about to vanish" in failure.output_tail


def test_a_stage_failure_naming_no_task_is_reported_not_raised_raw(tmp_path):
    run = _run(tmp_path)
    report = experiment._crashed_rank(ClusterError("the Spark job 'x' failed: SparkContext was shut down"), run)
    assert report["rank"] is None
    failure = experiment._rank_failure(sorted([report], key=experiment._first_cause), run)
    assert "SparkContext was shut down" in str(failure) and "rank None" not in str(failure)


def _timed_out(rank: int, peer: int) -> dict:
    return {"ok": False, "rank": rank, "tail": f"rank {rank} waiting", "traceback": "",
            "error": f"CollectiveError: rank {rank} timed out during allreduce #4: rank {peer} made no progress "
                     "for 3 s; rank 1 may be hung"}


def test_the_rank_that_never_reported_is_blamed_when_peers_wait_on_each_other(tmp_path):
    run = _run(tmp_path)
    run.storage.write_text(run.dir.worker_log(2), "rank 2 stuck in its data loader\n")
    # rank 0 waited on rank 1, which itself waited on rank 2; rank 2 never said a word
    failures = sorted([_timed_out(1, 2), _timed_out(0, 1)], key=experiment._first_cause)
    failure = experiment._rank_failure(failures, run)
    assert str(failure).startswith("experiment app_1 failed: rank 2 made no progress"), str(failure)
    assert "rank 1 saw: CollectiveError: rank 1 timed out" in str(failure)
    assert failure.output_tail == "rank 2 stuck in its data loader"


def test_a_rank_own_error_is_blamed_before_a_peer_that_timed_out(tmp_path):
    run = _run(tmp_path)
    own = {"ok": False, "rank": 1, "tail": "rank 1 diverged", "traceback": "Traceback ...",
           "error": "RuntimeError: loss is nan"}
    failures = sorted([_timed_out(0, 1), own], key=experiment._first_cause)
    failure = experiment._rank_failure(failures, run)
    assert "rank 1 raised RuntimeError: loss is nan" in str(failure)
