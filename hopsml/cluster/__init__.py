"""Cluster plumbing: what makes a run's code and Python stack arrive on the executors intact (the preflight
check of each executor's stack, the user's own modules that travel with a run). The Spark session,
environment shipping, the worker daemon and the channel's keys move here next; nothing here imports
the launcher, the engine or the verbs."""
