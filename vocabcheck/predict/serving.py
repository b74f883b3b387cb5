"""What to serve a pair with: per batch size, the k a candidate's predicted speedups choose — 0 where no k is
predicted to beat plain decoding by :data:`MARGIN` — and the schedule an engine takes for that table
(:func:`vocabcheck.engines.vllm.plan_config` writes vLLM's ``speculative_config`` from it).

vLLM takes one ``num_speculative_tokens`` (the most any batch size uses) and, where batch sizes differ,
``num_speculative_tokens_per_batch_size``: inclusive (start, end, k) ranges from batch size 1, k capped by
``num_speculative_tokens``, the last range carried on to larger batches (``vllm/v1/spec_decode/dynamic/utils.py``).
A measured batch size's k holds from it up to the next measured one; the table starts at 1 whatever was measured
first. Where predict's costs were measured on a disturbed machine there is no recommendation: the ranking is noise.

A row of 0 is priced as the engine runs it: plain decoding on vocabcheck's decoder, but on vLLM the speculative
engine drafting nothing (``Costs.idle_speedup``; vLLM 0.32's CPU build ran it at 0.82-0.88x of the plain engine at
batch 16).
So on vLLM a batch size can lose whatever k it is served, and a table is served only where it pays over the batch
sizes measured as a whole (:attr:`ServePlan.pays`); where it does not, the engine serves without speculation.
"""

from __future__ import annotations

import math
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
    speedup: float  # where k is 0: 1.0 on vocabcheck's decoder; on vLLM its speculative engine drafting nothing
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

    @property
    def pays(self) -> bool:
        """Whether serving this table beats serving without speculation. Where no batch size is predicted to lose
        (:attr:`loses_at`; always on vocabcheck's decoder, whose 0 is a plain step), whenever some batch size
        speculates (each such row is already MARGIN faster than its 0). Where some batch size loses (vLLM, drafting
        nothing there costing more than speculation gains), only if the measured batch sizes gain as a whole: the
        geometric mean of the rows' predicted speedups (each batch size weighed alike) at least 1 + MARGIN."""
        if not self.rows or not self.k_max:
            return False
        if not self.loses_at:
            return True
        mean = math.exp(sum(math.log(max(row.speedup, 1e-9)) for row in self.rows) / len(self.rows))
        return mean >= 1.0 + MARGIN

    @property
    def loses_at(self) -> tuple[int, ...]:
        """The measured batch sizes this table is predicted to serve more than MARGIN slower than plain decoding
        (on vLLM, where even drafting nothing costs): where a server runs that many rows, it gains by serving
        without speculation."""
        return tuple(row.batch_size for row in self.rows if row.speedup < 1.0 - MARGIN)

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
    """The best k where it is predicted MARGIN faster than the engine serving 0 there (plain decoding on vocabcheck's
    decoder; vLLM's speculative engine drafting nothing, :attr:`Costs.idle_speedup`), else 0 at that price."""
    best, costs = candidate.best, candidate.costs
    spread, idle = (costs.spread, costs.idle_speedup) if costs else (1.0, 1.0)
    if best.speedup < idle + MARGIN:
        return ServeRow(batch_size, 0, idle, spread)
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
