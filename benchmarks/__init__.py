"""Benchmarks: our code and the peers side by side, in one process, on the same data."""
