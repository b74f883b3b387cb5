"""The speculative decoder. It consumes a pair's :class:`vocabcheck.verdict.Alignment` and never re-derives
compatibility. ``generate`` is the one engine that the CLI, the benchmark and the tests share."""

from .engine import METHODS, Generation, Metrics, generate
from .sampling import Sampling

__all__ = ["METHODS", "Generation", "Metrics", "Sampling", "generate"]
