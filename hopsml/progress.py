"""Progress of long Spark work, as a bar of finished tasks (the console progress bar stays off).

    with spark_progress(sc, "prepare images 'flowers'"):
        ... Spark jobs ...

The jobs started inside the block run in their own job group, so the Spark UI names the work too.
"""

from __future__ import annotations

import threading
import uuid
from contextlib import contextmanager
from typing import Any, Iterator

from tqdm.auto import tqdm

_POLL_S = 0.5


def _task_counts(sc: Any, group: str, seen: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """(finished, total) tasks over every stage of the group's jobs so far."""
    tracker = sc.statusTracker()
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in (job.stageIds if job else []):
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                seen[stage_id] = (stage.numCompletedTasks, stage.numTasks)
    return sum(done for done, _ in seen.values()), sum(total for _, total in seen.values())


@contextmanager
def spark_progress(sc: Any, description: str, enabled: bool = True) -> Iterator[None]:
    """Show a progress bar of the Spark tasks run inside the block; quiet when not `enabled`."""
    group = f"hopsml-{uuid.uuid4().hex[:12]}"
    sc.setJobGroup(group, description)
    stop = threading.Event()
    bar = tqdm(total=0, desc=description, unit="task", disable=not enabled, leave=False)

    def poll() -> None:
        seen: dict[int, tuple[int, int]] = {}
        while not stop.wait(_POLL_S):
            done, total = _task_counts(sc, group, seen)
            bar.total, bar.n = total, done
            bar.refresh()

    thread = threading.Thread(target=poll, name="hopsml-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        bar.close()
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
