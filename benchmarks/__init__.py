"""Benchmarks: run each one as a module from the repository root, e.g. ``python -m benchmarks.compare_speed``."""
