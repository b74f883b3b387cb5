"""What a benchmark measures (the plan), what it measured (cells and rows) and the ideal it is held against.

The ideal (Leviathan et al. 2023): with per-token acceptance α, k proposals and cost ratio c (one draft forward /
one target forward, measured at the same batch size), a step yields (1 - α^(k+1)) / (1 - α) tokens for the cost of
k·c + 1 target steps, so the expected speedup is (1 - α^(k+1)) / ((1 - α)(k·c + 1)). The first factor is the mean
accepted length L, measured directly, so ideal = L / (k·c + 1), and ``efficiency`` = measured / ideal shows how far
the engine's own overhead — and a verification pass that costs more than one step — keep it from the limit.
``verify_cost`` reports that second factor: one verification pass over k+1 tokens / one plain decoding step (about
1 where the target is memory-bound, as on a GPU at small batch; more where it is compute-bound, as on a CPU or at
large batch). ``engine_efficiency`` = measured / (L / (k·c + verify_cost)) isolates the engine's own overhead.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..decode.metrics import Metrics
from ..decode.options import DecodeOptions


@dataclass(frozen=True)
class BenchPlan:
    """Which cells to measure and how often. ``options`` is what every cell's generate call does (its method is
    the cell's); every sequence generates exactly ``max_new_tokens`` tokens (eos ignored), greedy."""

    batch_sizes: tuple[int, ...] = (1, 16)
    methods: tuple[str, ...] = ("none", "ngram", "draft")
    options: DecodeOptions = field(default_factory=lambda: DecodeOptions(ignore_eos=True, time_phases=True))
    warmup: int = 1
    repeat: int = 3
    compare_hf: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", replace(self.options, ignore_eos=True, time_phases=True))

    @property
    def k(self) -> int:
        return self.options.k

    @property
    def max_new_tokens(self) -> int:
        return self.options.max_new_tokens


@dataclass
class Cell:
    """One (method, batch size) cell: every repeat's metrics and whether its greedy output matched plain decoding."""

    method: str
    batch_size: int
    runs: list[Metrics] = field(default_factory=list)
    outputs: list[tuple[tuple[int, ...], ...]] = field(default_factory=list)
    lossless: bool | None = None

    def _median(self, values: Sequence[float]) -> float:
        return statistics.median(values) if values else 0.0

    @property
    def tpot_ms(self) -> float:
        return self._median([m.tpot_ms for m in self.runs])

    @property
    def tpot_spread(self) -> tuple[float, float]:
        values = [m.tpot_ms for m in self.runs]
        return (min(values), max(values)) if values else (0.0, 0.0)

    @property
    def tokens_per_s(self) -> float:
        return self._median([m.tokens_per_s for m in self.runs])

    @property
    def totals(self) -> Metrics:
        merged = self.runs[0]
        for m in self.runs[1:]:
            merged = merged.merge(m)
        return merged

    @property
    def draft_pass_s(self) -> float:
        """Median time of one draft forward (a batch of one token per row)."""
        return self._median([m.draft_s / m.draft_passes for m in self.runs if m.draft_passes])

    @property
    def verify_pass_s(self) -> float:
        """Median time of one target forward after prefill (k+1 tokens per row for speculation, 1 for none)."""
        return self._median([m.target_s / m.verify_passes for m in self.runs if m.verify_passes])


@dataclass(frozen=True)
class Row:
    method: str
    batch_size: int
    tpot_ms: float
    tpot_spread_ms: tuple[float, float]
    tokens_per_s: float
    acceptance_rate: float | None
    mean_accepted_length: float | None
    acceptance_by_position: tuple[float, ...]
    speedup: float | None
    ideal_speedup: float | None = None
    efficiency: float | None = None
    alpha: float | None = None
    cost_ratio: float | None = None
    verify_cost: float | None = None
    engine_efficiency: float | None = None
    lossless: bool | None = None
    note: str = ""


@dataclass(frozen=True)
class BenchResult:
    plan: BenchPlan
    rows: tuple[Row, ...]
    hf_rows: tuple[Row, ...]
    device: str
    dtype: str
    prompts: int
    seconds: float
    hf_note: str = ""
    interrupted: bool = False  # Ctrl-C: the rows hold the repeats measured so far
    translated: bool = False  # the draft ran through the tokens its tokenizer shares with the target's

    def row(self, method: str, batch_size: int) -> Row | None:
        return next((r for r in self.rows + self.hf_rows if r.method == method and r.batch_size == batch_size), None)

    @property
    def lossless(self) -> bool:
        return all(r.lossless is not False for r in self.rows + self.hf_rows)


def ideal_speedup(mean_accepted_length: float, k: int, cost_ratio: float) -> float:
    """Leviathan et al. 2023 with α eliminated through the measured mean accepted length L."""
    return mean_accepted_length / (k * cost_ratio + 1.0)


def alpha_from_length(mean_accepted_length: float, k: int) -> float:
    """The per-token acceptance α for which (1 - α^(k+1)) / (1 - α) equals the measured mean accepted length."""
    target = min(max(mean_accepted_length, 1.0), k + 1.0)
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        value = sum(mid ** i for i in range(k + 1))
        if value < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


