"""The engine behind the experiment verbs: start a run, run its stages (a single task, parallel
executions, barrier-mode ranks with retries and resume, the trials of a search), decide whom a failure
blames, and finish the record. hopsml.experiment holds the hops-compatible signatures and calls in here.

    engine.py   the record, the settings snapshot, launch's task(s), the ranks' attempts
    blame.py    which rank a failed run blames, and whether a retry can cure it
    search.py   the trials of a search: batches, early stopping, the summary and the best trial
"""
