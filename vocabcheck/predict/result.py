"""What a prediction says: per draft (or n-gram lookup) and per k, the acceptance `run` would measure and the speedup
the measured costs give it; refused pairs carry the `compare` reason instead."""

from __future__ import annotations

from dataclasses import dataclass
from ..methods import Method


@dataclass(frozen=True)
class Counts:
    """What one k's steps add up to, as :class:`vocabcheck.decode.metrics.Metrics` counts them (greedy: exact;
    sampled: expected values)."""

    k: int
    steps: float
    drafted: float
    accepted: float
    drafted_at: tuple[float, ...] = ()
    accepted_at: tuple[float, ...] = ()

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """1 + accepted proposals per verification, as `run` reports it."""
        return 1.0 + self.accepted / self.steps if self.steps else 1.0

    @property
    def acceptance_by_position(self) -> tuple[float, ...]:
        return tuple(a / d if d else 0.0 for a, d in zip(self.accepted_at, self.drafted_at))


@dataclass(frozen=True)
class KPrediction:
    """One k: the counts and the predicted speedup over plain decoding (None where no cost was measured)."""

    counts: Counts
    speedup: float | None

    @property
    def k(self) -> int:
        return self.counts.k


@dataclass(frozen=True)
class Costs:
    """Measured on this device, in seconds: one plain target step, one draft forward, and one verification pass per
    width (tokens per row: 2 … k_max + 1), all at the prediction's batch size with a warm cache."""

    target_step_s: float
    draft_step_s: float
    verify_s: tuple[tuple[int, float], ...]  # (width, seconds)
    noise: str = ""  # why these timings cannot be trusted (predict/cost.py), "" where nothing says so
    spread: float = 1.0  # the largest median over fastest of these timings: a speedup is uncertain by about this factor

    @property
    def cost_ratio(self) -> float:
        """c: one draft forward / one target step."""
        return self.draft_step_s / self.target_step_s if self.target_step_s else 0.0

    def verify_cost(self, k: int) -> float:
        """One verification over k + 1 tokens / one target step, held to what a verification physically costs: at
        least a plain step (it runs the same forward over more tokens), and no less than a narrower one. A timing
        that says otherwise was disturbed (a busy machine: verification passes read 0.59-0.84 of a plain step where
        bench measured 1.06-1.74), and taken as it is it predicts a draft that accepts nothing to pay."""
        if not self.target_step_s:
            return 1.0
        ratio = 1.0
        for width, seconds in sorted(self.verify_s):
            if width > k + 1:
                break
            ratio = max(ratio, seconds / self.target_step_s)
        return ratio

    def speedup(self, mean_accepted_length: float, k: int) -> float:
        """Tokens per step over what the step costs, in plain target steps: L / (k·c + v(k)); with v(k) >= 1 it
        never exceeds the mean accepted length L, and a draft that accepts nothing (L = 1) never pays."""
        return mean_accepted_length / (k * self.cost_ratio + self.verify_cost(k))


@dataclass(frozen=True)
class Candidate:
    """One draft as the user named it (or ``ngram``): greedy per k, sampled per (temperature, k), or the refusal."""

    draft: str
    method: Method  # a proposing one
    translated: bool = False
    refused: str | None = None
    greedy: tuple[KPrediction, ...] = ()
    sampled: tuple[tuple[float, tuple[KPrediction, ...]], ...] = ()
    costs: Costs | None = None
    same_rows: bool = True  # the draft has the target's rows (an engine that compares vocab_size takes it as it is)

    @property
    def best(self) -> KPrediction | None:
        """The greedy k with the highest predicted speedup (the highest acceptance where no cost was measured)."""
        if not self.greedy:
            return None
        return max(self.greedy, key=lambda p: (p.speedup if p.speedup is not None else 0.0,
                                               p.counts.mean_accepted_length))


@dataclass(frozen=True)
class Prediction:
    """Every candidate in rank order (best predicted speedup first; refused pairs last)."""

    target: str
    candidates: tuple[Candidate, ...]
    prompts: int
    tokens: int  # target tokens the predictions were made over
    source: str  # "generated" or "recorded" (the prompt file's responses)
    k_values: tuple[int, ...]
    temperatures: tuple[float, ...]
    batch_size: int
    device: str
    dtype: str
    seconds: float

    @property
    def noise(self) -> str:
        """Why the predicted speedups cannot be ranked ("" where nothing says so): the costs' noise, each reason
        once. Acceptance does not depend on timing and stands either way."""
        reasons = (c.costs.noise for c in self.candidates if c.costs is not None and c.costs.noise)
        return "; ".join(dict.fromkeys(r for reason in reasons for r in reason.split("; ")))
