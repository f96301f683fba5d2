"""The task side of a stage, run inside a Spark task (and the processes it starts): the barrier-task skeleton
with a hook per framework (`rank`: hopsml's collective, torch's teardown; `tf_cluster`: TensorFlow's
strategies), the user's function run with its output captured and its report made (`function`), a rank or
trial in a child process of its own (`child`), a search's long-lived slot worker (`worker`), and a rank's
timeline (`recorded`). What both sides share is one level up: `spec`, `messages`, `channel`, `seeds`."""
