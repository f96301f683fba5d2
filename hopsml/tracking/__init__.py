"""What a run records: its experiment record, metrics, TensorBoard events, environment, versions and lineage."""
