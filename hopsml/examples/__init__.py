"""The models the quickstart, the notebooks and the benchmarks train: scikit-learn digits as an MLP and as a CNN."""
