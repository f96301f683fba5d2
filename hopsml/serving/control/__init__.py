"""The control side of a serving, run in the user's process (a notebook, a job, the CLI): define, start, stop,
query and delete servings (`lifecycle`, behind hops' functions), canary rollouts and their gate (`canary`), the
KServe export (`kserve`) and the `hopsml serving` commands (`commands`). It starts the server process (`server/`)
and reads what the instances logged (`instance/`, `analysis/`); nothing below imports it."""
