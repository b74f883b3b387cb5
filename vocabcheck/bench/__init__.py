"""`vocabcheck bench`: time per output token with no speculation, n-gram and draft-model speculation, per batch
size, against the ideal speedup (:mod:`.plan`) and against transformers' own assisted generation (:mod:`.peer`);
:mod:`.run` measures the cells."""

from .plan import BenchPlan, BenchResult, Cell, Row, alpha_from_length, ideal_speedup
from .run import PROMPT_MODULES, default_prompts, run_bench

__all__ = ["PROMPT_MODULES", "BenchPlan", "BenchResult", "Cell", "Row", "alpha_from_length",
           "default_prompts", "ideal_speedup", "run_bench"]
