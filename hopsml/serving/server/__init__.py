"""The server process of a serving, long-lived and detached from the user's process: the supervisor that binds
the port and runs, restarts and scales the instances (`supervisor`), and what it records about itself in the
project (`state`), which the control side reads. It imports the instance's contract (`instance/`: the spec it
hands an instance, the inference log's options) and the package's shared modules, never the control side."""
