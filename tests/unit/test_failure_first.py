"""A failing rank tells the driver why before its slow final upload, and the stage is cancelled
only once that upload is done (or a grace period ran out), whichever order the reports arrive in."""

import threading
import time

from hopsml.cluster import auth
from hopsml.fs import Storage
from hopsml.launcher.channel import DriverChannel
from hopsml.launcher.driver import StageMonitor
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task.function import run_function


def _report(rank: int, error: str) -> dict:
    return {"ok": False, "rank": rank, "error": error, "tail": "", "traceback": ""}


def test_the_failing_report_arrives_before_the_finished_one_over_a_real_channel(tmp_path):
    arrived, done = [], threading.Event()

    def on_message(message, _connection):
        if message["kind"] in ("failing", "finished"):
            arrived.append(message)
        if message["kind"] == "finished":
            done.set()

    driver = DriverChannel("127.0.0.1", auth.new_secret(), on_message)
    try:
        spec = TaskSpec(Storage(str(tmp_path)), "Projects/p/Experiments/app_1", driver.address, driver.secret)

        def train():
            raise ValueError("bad batch")

        report = run_function(train, {}, spec, rank=1, world_size=2)
        assert done.wait(10)
    finally:
        driver.close()
    assert [m["kind"] for m in arrived] == ["failing", "finished"]
    assert arrived[0]["rank"] == 1 and arrived[0]["error"] == "ValueError: bad batch" == report["error"]


def test_a_peer_failing_first_waits_for_the_failing_rank_to_finish_its_upload():
    live = StageMonitor(abort_on_failure=True)
    live({"kind": "failing", **_report(1, "ValueError: bad batch")}, None)
    live({"kind": "finished", **_report(0, "CollectiveError: rank 0 lost its connection to rank 1")}, None)
    assert not live.failed.wait(0.3)  # rank 1 is still copying its logs: the stage is not cancelled yet
    live({"kind": "finished", **_report(1, "ValueError: bad batch")}, None)
    assert live.failed.wait(5)
    assert [f.rank for f in live.failures()] == [0, 1]


def test_a_rank_that_never_finishes_its_upload_is_not_waited_for_past_the_grace():
    live = StageMonitor(abort_on_failure=True, upload_grace_s=0.2)
    live({"kind": "failing", **_report(1, "ValueError: bad batch")}, None)
    start = time.monotonic()
    live({"kind": "finished", **_report(0, "CollectiveError: rank 0 lost its connection to rank 1")}, None)
    assert live.failed.wait(5)
    assert time.monotonic() - start >= 0.2
    # the failing rank's cause is known although it never finished
    assert {f.rank: f.error for f in live.failures()}[1] == "ValueError: bad batch"


def test_the_failing_rank_finishing_first_cancels_at_once():
    live = StageMonitor(abort_on_failure=True)
    live({"kind": "failing", **_report(1, "ValueError: bad batch")}, None)
    live({"kind": "finished", **_report(1, "ValueError: bad batch")}, None)
    assert live.failed.is_set()
    assert [f.rank for f in live.failures()] == [1]


def test_each_report_is_kept_once_whether_the_channel_or_sparks_collect_brought_it():
    finished = []
    monitor = StageMonitor(on_finished=finished.append)
    monitor({"kind": "finished", "ok": False, "rank": 1, "error": "ValueError: bad batch", "cause": "raised"}, None)
    monitor({"kind": "finished", "ok": False, "rank": 1, "error": "ValueError: bad batch", "cause": "raised"}, None)
    reports = monitor.settle([{"ok": False, "rank": 1, "error": "ValueError: bad batch"},
                              {"ok": True, "rank": 0, "result": {"metric": 1.0}}])  # rank 0 never reached us
    assert [(r.rank, r.ok) for r in reports] == [(1, False), (0, True)]
    assert [r.rank for r in finished] == [1, 0]
    assert [f.rank for f in monitor.failures()] == [1]
