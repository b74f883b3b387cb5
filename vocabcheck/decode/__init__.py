"""The speculative decoder. It consumes a pair's :class:`vocabcheck.verdict.Alignment` and never re-derives
compatibility. ``generate`` is the one engine that the CLI, the benchmark and the tests share; ``DecodeOptions`` is
the one description of what a call does."""

from .engine import generate
from .metrics import Metrics
from .options import DecodeOptions
from .result import Generation
from .sampling import Sampling

__all__ = ["DecodeOptions", "Generation", "Metrics", "Sampling", "generate"]
