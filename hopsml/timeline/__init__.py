"""Where a distributed run's time goes: a timeline of every rank, and stragglers named while it runs.

Each rank records spans (`recorder`): every collective op with its bytes, path and the split between waiting for
peers and moving data, waits for the next batch, checkpoint saves, and the user's own::

    from hopsml import timeline
    with timeline.span("forward"):
        loss = model(batch)

Written per rank as Chrome trace event JSON (`chrome`) and merged into one trace in the run folder (`merge`:
`<run>/timeline/trace.json`), clocks aligned to the driver's by min-round-trip pings (`clock`). Ranks send their
ops' arrival times to the driver in batches (`reporter`); the driver names stragglers (`stragglers`).
Open the trace in https://ui.perfetto.dev or chrome://tracing; `hopsml experiments timeline ID` writes it.
"""

from hopsml.timeline.recorder import CHECKPOINT, COMPUTE, INPUT, Recorder, current, recording
from hopsml.timeline.span import input_waits, span

__all__ = ["CHECKPOINT", "COMPUTE", "INPUT", "Recorder", "current", "input_waits", "recording", "span"]
