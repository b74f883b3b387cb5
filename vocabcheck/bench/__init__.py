"""`vocabcheck bench`: time per output token with no speculation, n-gram and draft-model speculation, per batch
size and k, against the ideal speedup (:mod:`.plan`) and against transformers' own assisted generation
(:mod:`.peer`); :mod:`.run` measures the cells."""

from .plan import (AUTO, BenchPlan, BenchResult, Cell, Failure, Row, alpha_from_length, ideal_speedup, parse_ks)
from .run import PROMPT_MODULES, Predict, default_prompts, run_bench

__all__ = ["AUTO", "PROMPT_MODULES", "BenchPlan", "BenchResult", "Cell", "Failure", "Predict", "Row",
           "alpha_from_length", "default_prompts", "ideal_speedup", "parse_ks",
           "run_bench"]
