"""The decoder's step sequence, replayed from what each proposal would have matched — no model runs here.

Greedy speculative output is the target's greedy chain, and at every step the proposer proposes from the true prefix.
So a row is described by, at each position p of its continuation (p ≥ 1: token 0 comes from prefill), how many
proposals the proposer would make there (``available``: unlimited for a draft model, the n-gram match's length for
prompt lookup) and how many of them in a row equal the target's tokens from p on (``matched``, capped at the
continuation's end). The step sequence then follows the engine (:func:`vocabcheck.decode.engine.speculative_step`):
every live row of a batch proposes ``min(k, largest remaining budget - 1)`` tokens, accepts ``m`` of them and emits
``m + 1`` tokens; a row cut by eos or its length budget inside an accepted run counts the emitted tokens but the last
as drafted and accepted, as :class:`vocabcheck.decode.metrics.RowMetrics` does. The counts are then exactly what
`run` measures.

For sampling, a row is described by α at each position (the probability that a proposal there is accepted,
Σ min(p, q)), and the same step sequence is followed in expectation, one row at a time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..decode.metrics import Metrics, RowMetrics
from ..methods import Method
from .result import Counts

UNLIMITED = 1 << 30


@dataclass(frozen=True)
class RowRuns:
    """One row: its continuation's length, its budget (``max_new_tokens``, or the length of a recorded response),
    and per position p (index 0 unused) the proposals available and the run of them that matches."""

    length: int
    budget: int
    matched: tuple[int, ...]
    available: tuple[int, ...] | None = None  # None: a draft model proposes as many as it is asked for

    def proposal(self, p: int, width: int) -> tuple[int, int]:
        """(proposals made, proposals matching in a row) at position p for a step of this width."""
        made = width if self.available is None else min(width, self.available[p])
        return made, min(self.matched[p], made)


def streaks(hits: Sequence[bool]) -> tuple[int, ...]:
    """For each position, how many consecutive hits start there."""
    out = [0] * (len(hits) + 1)
    for p in range(len(hits) - 1, -1, -1):
        out[p] = out[p + 1] + 1 if hits[p] else 0
    return tuple(out[:-1])


class _Tally:
    def __init__(self, k: int):
        self.k, self.steps, self.drafted, self.accepted = k, 0.0, 0.0, 0.0
        self.drafted_at, self.accepted_at = [0.0] * k, [0.0] * k

    def counts(self) -> Counts:
        return Counts(k=self.k, steps=self.steps, drafted=self.drafted, accepted=self.accepted,
                      drafted_at=tuple(self.drafted_at), accepted_at=tuple(self.accepted_at))


def greedy_counts(rows: Sequence[RowRuns], k: int, batch_size: int, ragged: bool = False) -> Counts:
    """Steps, drafted and accepted proposals of a greedy run with k, rows in batches of ``batch_size`` in order,
    counted by the decoder's own :class:`RowMetrics`; the steps' widths as an engine that pads its verification
    (vocabcheck's decoder) or, ``ragged``, as one that verifies each row's own proposals (vLLM) spends them."""
    metrics = [RowMetrics() for _ in rows]
    widths: Counter[int] = Counter()
    for begin in range(0, len(rows), batch_size):
        _greedy_batch(rows[begin:begin + batch_size], k, metrics[begin:begin + batch_size], widths, ragged)
    return replace(counts_of(metrics, k), widths=tuple(sorted(widths.items())))


def _greedy_batch(rows: Sequence[RowRuns], k: int, metrics: Sequence[RowMetrics], widths: Counter[int],
                  ragged: bool) -> None:
    """The batch's steps; ``widths`` counts them, once per live row, by the proposals they verify per row: the most
    any row made, where every row is padded to it (vocabcheck's decoder), or, ``ragged``, the rows' mean rounded
    (vLLM verifies each row's own proposals, and :func:`vocabcheck.predict.cost.engine_step_costs` keys its timed
    steps the same way)."""
    emitted = [1] * len(rows)
    live = [i for i, row in enumerate(rows) if row.length > 1]
    while live:
        width = min(k, max(rows[i].budget - emitted[i] for i in live) - 1)
        verified, made_total = 0, 0
        for i in live:
            row, p = rows[i], emitted[i]
            made, m = row.proposal(p, width) if width > 0 else (0, 0)
            kept = min(m + 1, row.length - p)  # eos or the budget may end the row inside its accepted run
            metrics[i].record_step(made, m, kept, 0.0, row.budget - p)
            emitted[i] = p + kept
            verified, made_total = max(verified, made), made_total + made
        widths[round(made_total / len(live)) if ragged else verified] += len(live)
        live = [i for i in live if emitted[i] < rows[i].length]


def counts_of(metrics: Sequence[RowMetrics], k: int) -> Counts:
    """The counts of rows the decoder's way (:class:`Metrics` sums them)."""
    total = Metrics(method=Method.DRAFT, k=k, batch_size=len(metrics), rows=list(metrics))
    return Counts(k=k, steps=total.steps, drafted=total.drafted, accepted=total.accepted,
                  drafted_at=tuple(total.drafted_at), accepted_at=tuple(total.accepted_at))


def expected_counts(tables: Sequence[Sequence[Sequence[float]]], budgets: Sequence[int], k: int) -> Counts:
    """Expected steps, drafted and accepted proposals of a sampled run with k, one row at a time: ``tables[r][p]``
    holds, for a step of row r starting at position p (index 0 unused), the probability that each proposal it can
    make is accepted (a draft model: α at p, p + 1, …; n-gram lookup: as many as the match proposes)."""
    tally = _Tally(k)
    for table, budget in zip(tables, budgets):
        _expected_row(table, budget, k, tally)
    return tally.counts()


def position_tables(alpha: Sequence[float], k: int) -> list[list[float]]:
    """A draft model's table from α per position: the proposals from p on are judged at p, p + 1, …"""
    return [list(alpha[p:p + k]) for p in range(len(alpha))]


def _expected_row(table: Sequence[Sequence[float]], budget: int, k: int, tally: _Tally) -> None:
    length = len(table)
    reach = [0.0] * (length + 1)  # probability that a step starts at position p
    if length > 1:
        reach[1] = 1.0
    for p in range(1, length):
        weight = reach[p]
        if weight == 0.0:
            continue
        made = max(0, min(k, budget - p - 1, len(table[p])))
        tally.steps += weight
        tally.drafted += made * weight
        survive = 1.0
        for i in range(made + 1):
            a = table[p][i] if i < made else 0.0
            stop = survive * (1.0 - a) if i < made else survive
            tally.accepted += i * stop * weight
            if i < made:
                tally.drafted_at[i] += weight
                tally.accepted_at[i] += survive * a * weight
            if p + i + 1 < length:
                reach[p + i + 1] += stop * weight
            survive *= a
