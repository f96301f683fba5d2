"""What a serving's inference log says, read in the user's process: training-serving skew and drift against the
model's training dataset (`monitor`) and whether serving preprocessed the inputs as training did
(`preprocessing_check`). It reads the log through `instance/inference_log` and imports neither the server nor the
control side, which uses it (the canary's gate, the commands)."""
