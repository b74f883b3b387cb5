"""What to serve a pair with: per batch size, the k a candidate's predicted speedups choose — 0 where no k is
predicted to beat plain decoding by :data:`MARGIN` — and the schedule an engine takes for that table
(:func:`vocabcheck.engines.vllm.plan_config` writes vLLM's ``speculative_config`` from it).

vLLM takes one ``num_speculative_tokens`` (the most any batch size uses) and, where batch sizes differ,
``num_speculative_tokens_per_batch_size``: inclusive (start, end, k) ranges from batch size 1, k capped by
``num_speculative_tokens``, the last range carried on to larger batches (``vllm/v1/spec_decode/dynamic/utils.py``).
A measured batch size's k holds from it up to the next measured one; the table starts at 1 whatever was measured
first. Where predict's costs were measured on a disturbed machine there is no recommendation: the ranking is noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..methods import Method
from .result import Candidate, Prediction

MARGIN = 0.03  # a k must be predicted this much faster than plain decoding to be served (as -k auto's gain_margin)


@dataclass(frozen=True)
class ServeRow:
    """One measured batch size: the k to serve it with (0: no speculation) and that k's predicted speedup."""

    batch_size: int
    k: int
    speedup: float  # 1.0 where k is 0
    spread: float = 1.0  # the costs' timings' median over fastest at this batch size (Costs.spread)


@dataclass(frozen=True)
class ServePlan:
    """A candidate's table over the measured batch sizes, in increasing order."""

    draft: str  # as the user named it, or "ngram"
    method: Method
    rows: tuple[ServeRow, ...]
    same_rows: bool = True  # the draft has the target's rows: vLLM takes it as it is (else: `vocabcheck align` first)

    @property
    def k_max(self) -> int:
        return max((row.k for row in self.rows), default=0)

    def row_at(self, batch_size: int) -> ServeRow:
        """The measured row whose range in :meth:`schedule` holds ``batch_size``: the last measured batch size at or
        below it (the first row below the first measured size; the last row carried on past it)."""
        return next((row for row in reversed(self.rows) if row.batch_size <= batch_size), self.rows[0])

    def k_at(self, batch_size: int) -> int:
        """The k this table serves ``batch_size`` rows with, as vLLM looks it up in :meth:`schedule`."""
        return self.row_at(batch_size).k if self.rows else 0

    def schedule(self) -> tuple[tuple[int, int, int], ...]:
        """vLLM's (start, end, k) ranges: each measured batch size's k from it (from 1 for the first) to the batch
        size before the next measured one, the last range ending at its own batch size (vLLM carries it on); neighbours
        with the same k merged."""
        ranges: list[list[int]] = []
        for index, row in enumerate(self.rows):
            start = 1 if index == 0 else row.batch_size
            end = self.rows[index + 1].batch_size - 1 if index + 1 < len(self.rows) else row.batch_size
            if ranges and ranges[-1][2] == row.k:
                ranges[-1][1] = end
            else:
                ranges.append([start, end, row.k])
        return tuple((start, end, k) for start, end, k in ranges)


def plans(predictions: Sequence[Prediction]) -> tuple[ServePlan, ...]:
    """One plan per candidate that has predicted speedups at every batch size (one prediction per batch size, in any
    order, as :func:`vocabcheck.predict.predictor.predict_batches` returns them: the first given first), its rows in
    increasing batch size, ranked as the first prediction ranks them; none where any batch size's costs were disturbed
    (``Prediction.noise``) or where a draft runs through a translation (no engine serves one)."""
    if not predictions or any(p.noise for p in predictions):
        return ()
    by_size = sorted(predictions, key=lambda p: p.batch_size)
    out = []
    for candidate in predictions[0].candidates:
        same = [_same(p, candidate) for p in by_size]
        if candidate.refused or candidate.translated or any(c is None or c.best is None
                                                             or c.best.speedup is None for c in same):
            continue
        out.append(ServePlan(candidate.draft, candidate.method, tuple(_row(p.batch_size, c)
                                                                      for p, c in zip(by_size, same)),
                             same_rows=candidate.same_rows))
    return tuple(out)


def _same(prediction: Prediction, candidate: Candidate) -> Candidate | None:
    return next((c for c in prediction.candidates if (c.draft, c.method) == (candidate.draft, candidate.method)), None)


def _row(batch_size: int, candidate: Candidate) -> ServeRow:
    best, spread = candidate.best, candidate.costs.spread if candidate.costs else 1.0
    if best.speedup < 1.0 + MARGIN:
        return ServeRow(batch_size, 0, 1.0, spread)
    return ServeRow(batch_size, best.k, best.speedup, spread)


@dataclass(frozen=True)
class ServeConfig:
    """A plan as an engine takes it: vLLM's ``speculative_config`` (None: serve without speculation), and whether
    vLLM's own ``SpeculativeConfig`` accepted it (``validated_by``, "vLLM 0.32.0") or refused it (``refused``: its
    reason); neither where vLLM is not installed here or the target is not a local directory."""

    plan: ServePlan
    config: dict[str, Any] | None
    validated_by: str | None = None
    refused: str | None = None
