"""`hopsml experiments timeline ID`: the run's merged trace (merged again from the ranks' parts), where it is and
how to open it, and the stragglers the run named."""

from __future__ import annotations

import os

from hopsml import config, layout
from hopsml.fs import Storage
from hopsml.timeline import merge

OPEN_HINT = ("open it in https://ui.perfetto.dev (Open trace file; it stays in your browser) or in Chrome at "
             "chrome://tracing (Load): one process per rank, collectives with their bytes, path and time waiting "
             "for peers")


def experiments_timeline(settings: config.Settings, exp_id: str, output: str | None = None) -> str:
    """Write the run's merged trace (and a copy to `output`, a local file); says where and how to open it."""
    from hopsml.tracking import record as records

    storage = Storage(settings.root)
    rec = records.read_record(storage, settings.project, exp_id)  # an unknown id fails here, with the fix
    exp_dir = layout.ExperimentDir.from_id(settings.project, exp_id)
    extra = rec.to_dict()
    stragglers = (extra.get("stragglers") or {}).get("named", [])
    path = merge.merge(storage, exp_dir, {"stragglers": stragglers})
    ranks = len(merge.parts(storage, exp_dir))
    lines = [f"timeline of {exp_id} ({ranks} rank{'' if ranks == 1 else 's'}): {storage.uri(path)}"]
    if output:
        target = os.path.abspath(os.path.expanduser(output))
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        with open(target, "wb") as out:
            out.write(storage.read_bytes(path))
        lines.append(f"copied to {target}")
    lines.append(OPEN_HINT)
    lines += [f"straggler: {s.get('message', s)}" for s in stragglers] or ["no straggler was named"]
    return "\n".join(lines)
