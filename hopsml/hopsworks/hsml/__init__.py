"""hsml's module names over hopsml's model registry, for programs written against hopsworks' hsml."""
