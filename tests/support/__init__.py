"""Helpers the tests (and the benchmarks) share: fixture builders, the local hub server, the GGUF writer and the
fuzz suite's mutators, targets and worker. Nothing here is a test; pytest collects only ``tests/test_*.py``."""
