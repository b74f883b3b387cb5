"""What a benchmark measures (the plan), what it measured (cells and rows) and the ideal it is held against.

The ideal (Leviathan et al. 2023): with per-token acceptance α, k proposals and cost ratio c (one draft forward /
one target forward, measured at the same batch size), a step yields (1 - α^(k+1)) / (1 - α) tokens for the cost of
k·c + 1 target steps, so the expected speedup is (1 - α^(k+1)) / ((1 - α)(k·c + 1)). The first factor is the mean
accepted length L, measured directly, so ideal = L / (k·c + 1), and ``efficiency`` = measured / ideal shows how far
the engine's own overhead — and a verification pass that costs more than one step — keep it from the limit.
``verify_cost`` reports that second factor: one verification pass over k+1 tokens / one plain decoding step (about
1 where the target is memory-bound, as on a GPU at small batch; more where it is compute-bound, as on a CPU or at
large batch). ``engine_efficiency`` = measured / (L / (k·c + verify_cost)) isolates the engine's own overhead.
With ``k = "auto"`` the proposal length varies per row and step; k in these formulas is then the measured mean
number of tokens proposed per verification (``mean_proposed``), and α is not reported.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..decode.metrics import Metrics
from ..decode.options import DecodeOptions
from ..errors import BadOption
from ..methods import AUTO, MAX_K, Method, parse_ks  # noqa: F401  (parse_ks re-exported for bench)

KValue = int | str  # a fixed proposal length 1..MAX_K, or "auto" (the adaptive controller)


@dataclass(frozen=True)
class BenchPlan:
    """Which cells to measure and how often. ``options`` is what every cell's generate call does (its method and k
    are the cell's; ``ks`` defaults to ``options.k``); every sequence generates exactly ``max_new_tokens`` tokens
    (eos ignored). Phases (draft / target time) are timed only where timing them costs nothing (the engine's
    default: on the CPU); elsewhere a separate timing pass after the measured repeats gives the cost ratios."""

    batch_sizes: tuple[int, ...] = (1, 16)
    methods: tuple[Method, ...] = tuple(Method)
    options: DecodeOptions = field(default_factory=lambda: DecodeOptions(ignore_eos=True))
    warmup: int = 1
    repeat: int = 3
    compare_hf: bool = False
    ks: tuple[KValue, ...] | None = None
    served: tuple = ()  # bench --served: predict's serving tables (vocabcheck.predict.serving.ServePlan)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", replace(self.options, ignore_eos=True))
        object.__setattr__(self, "methods", tuple(Method.parse(m, "--methods") for m in self.methods))
        if self.ks is None:
            object.__setattr__(self, "ks", (self.options.k,))

    @property
    def k(self) -> KValue | None:
        """The one k of a plan with one; None where several run side by side."""
        return self.ks[0] if len(self.ks) == 1 else None

    @property
    def max_new_tokens(self) -> int:
        return self.options.max_new_tokens

    def cell_options(self, method: str, k: KValue) -> DecodeOptions:
        method = Method(method)
        return replace(self.options, method=method, k=k) if method.proposes else replace(self.options, method=method)


@dataclass
class Cell:
    """One (method, batch size, k) cell: every repeat's metrics over every prompt of the plan, the outputs, and
    whether its greedy output matched plain decoding. ``k`` is 0 for plain decoding. A peer's cell that raised is
    ``failed`` with the one-line reason and keeps no runs."""

    method: str
    batch_size: int
    k: KValue = 0
    runs: list[Metrics] = field(default_factory=list)
    outputs: list[tuple[tuple[int, ...], ...]] = field(default_factory=list)
    phase_runs: list[Metrics] = field(default_factory=list)  # the separate timing pass, where there is one
    others: list[float] = field(default_factory=list)  # per recorded run, other processes' share of the CPUs
    lossless: bool | None = None
    failed: str | None = None

    @property
    def key(self) -> tuple[str, int, KValue]:
        return (self.method, self.batch_size, self.k)

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
    def prompts(self) -> int:
        """Sequences per repeat: every prompt of the plan."""
        return len(self.outputs[0]) if self.outputs else 0

    @property
    def totals(self) -> Metrics:
        merged = self.runs[0]
        for m in self.runs[1:]:
            merged = merged.merge(m)
        return merged

    @property
    def _timed(self) -> list[Metrics]:
        return self.phase_runs or self.runs

    @property
    def draft_pass_s(self) -> float:
        """Median time of one draft forward (a batch of one token per row)."""
        return self._median([m.draft_s / m.draft_passes for m in self._timed if m.draft_passes and m.draft_s])

    @property
    def verify_pass_s(self) -> float:
        """Median time of one target forward after prefill (k+1 tokens per row for speculation, 1 for none)."""
        return self._median([m.target_s / m.verify_passes for m in self._timed if m.verify_passes and m.target_s])


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
    noise: str = ""  # why the row's figures cannot be taken as a result (empty: nothing says so)
    k: KValue = 0  # tokens proposed per step: an integer (0 for plain decoding) or "auto"
    prompts: int = 0  # sequences each repeat ran: every prompt of the plan
    mean_proposed: float | None = None  # tokens proposed per verification, measured (k itself where k is fixed)
    predicted_speedup: float | None = None  # a prediction made before measuring, where one was asked for
    accepted_tokens: float | None = None  # accepted proposals per repeat over every sequence of the cell, measured
    predicted_acceptance_rate: float | None = None
    predicted_mean_accepted_length: float | None = None
    predicted_accepted_tokens: float | None = None
    predicted_k: int | None = None  # the fixed k the prediction is for (at auto: the best predicted one)


@dataclass(frozen=True)
class Predicted:
    """What a prediction says of one cell before it is measured (:mod:`vocabcheck.bench.prediction`): the
    acceptance, mean accepted length and accepted proposals over the same sequences as the cell (greedy: exactly
    what it measures; sampled: expected values), and the speedup the measured costs give them. ``k`` is the fixed k
    predicted: the cell's, or at ``auto`` the k with the best predicted speedup."""

    k: int
    acceptance_rate: float
    mean_accepted_length: float
    accepted_tokens: float
    speedup: float | None


@dataclass(frozen=True)
class Failure:
    """A peer's cell that could not run: transformers raised; the reason is one line."""

    method: str
    batch_size: int
    k: KValue
    reason: str


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
    interrupted: bool = False  # Ctrl-C, SIGTERM or SIGHUP: the rows hold the repeats measured so far
    signum: int = 0  # the signal that stopped it
    translated: bool = False  # the draft ran through the tokens its tokenizer shares with the target's
    failures: tuple[Failure, ...] = ()  # peers' cells that raised (ours never fail silently)
    repeats_done: int = 0  # repeats that ran over every cell
    cells_planned: int = 0
    vllm_rows: tuple = ()  # bench --compare-vllm: vocabcheck.bench.vllm_rows.EngineRow per fixed-k cell
    vllm_note: str = ""

    @property
    def served(self) -> tuple:
        """bench --served: each table's batch sizes against the best fixed k (:mod:`vocabcheck.bench.served`)."""
        from .served import served_rows

        return served_rows(self, self.plan.served) if self.plan.served else ()

    def row(self, method: str, batch_size: int, k: KValue | None = None) -> Row | None:
        return next((r for r in self.rows + self.hf_rows if r.method == method and r.batch_size == batch_size
                     and (k is None or r.k == k)), None)

    @property
    def ks(self) -> tuple[KValue, ...]:
        return self.plan.ks

    @property
    def lossless(self) -> bool:
        return all(r.lossless is not False for r in self.rows + self.hf_rows) and \
            all(r.identical is not False for r in self.vllm_rows)

    @property
    def partial(self) -> bool:
        """Interrupted before every cell had every repeat."""
        return self.interrupted and self.repeats_done < self.plan.repeat


def ideal_speedup(mean_accepted_length: float, k: float, cost_ratio: float) -> float:
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
