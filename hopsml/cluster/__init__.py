"""Cluster plumbing, below the launcher, the engine and the verbs: the Spark session hopsml starts or joins
(`session`), the Python environment shipped to bare executors (`shipping`), what each task checks and installs
before a run's code (`preflight`, `local_modules`), the worker daemon Spark's Python workers fork from
(`worker_daemon`), the keys that sign what ranks and the driver exchange (`auth`), and the ports they listen
on (`ports`)."""
