"""What a prediction says: per draft (or n-gram lookup) and per k, the acceptance `run` would measure and the speedup
the measured costs give it; refused pairs carry the `compare` reason instead."""

from __future__ import annotations

from collections.abc import Sequence
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
    widths: tuple[tuple[int, int], ...] = ()  # (width, row-steps): the batch's steps by the proposals they verified
    # per row, each counted once per row it ran (a row's time per token is the mean of the steps it ran in)

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
    spread: float = 1.0  # the largest median over fastest of the timings that price the speedups (the steps where
    # timed): a speedup is uncertain by about this factor
    plain_step_s: float = 0.0  # the decoder's own plain-decoding step (0.0: not timed)
    step_s: tuple[tuple[int, float], ...] = ()  # (width, seconds): the decoder's own mean step of a speculative run by
    # the proposals it verified per row (0: the lookup found nothing, or one token was left)
    full_width: bool = True  # every step verifies k proposals (a draft model); n-gram lookup proposes up to k
    engine: str = "vocabcheck"  # whose steps step_s are: vocabcheck's decoder, or vLLM's (predict --engine vllm)
    idle_step_s: float = 0.0  # the engine's step where a served table says k = 0 (vLLM: its speculative engine
    # drafting nothing, cost.engine_step_costs); 0.0 where that is a plain step (vocabcheck's decoder)
    step_s_by_k: tuple[tuple[int, tuple[tuple[int, float], ...]], ...] = ()  # (k, (width, seconds)): each k's own
    # engine's steps by width, where a step's cost depends on the engine's k and not on its width alone (vLLM: a
    # step whose rows drafted unevenly ran slower than one where every row drafted k; cost.engine_step_costs)

    @property
    def idle_speedup(self) -> float:
        """A batch size served k = 0, over plain decoding: 1.0 on vocabcheck's decoder (it runs a plain step), the
        plain engine's step over the speculative engine's idle one on vLLM (below 1.0 where drafting nothing still
        costs)."""
        return self.plain_step_s / self.idle_step_s if self.idle_step_s and self.plain_step_s else 1.0

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

    def width_cost(self, width: int, k: int | None = None) -> float | None:
        """A speculative run's step verifying ``width`` proposals per row, in plain-decoding steps (None where the
        decoder's steps were not timed): the timed width's, or interpolated between the nearest timed widths; held
        to what a step physically costs: at least a plain step, and, on vocabcheck's decoder, no less than a
        narrower step and, where every step verifies k proposals (:attr:`full_width`, a draft model), at least the
        forwards it runs (k draft forwards and one verification over k + 1 tokens, :meth:`forwards_cost`).

        On an engine whose steps were timed per k (:attr:`step_s_by_k`: vLLM) a run with ``k`` is priced by its own
        engine's steps. Its width is the rows' mean proposals, not a verification's width: vLLM ran a step where
        every row drafted 4 in 44 ms and one where rows drafted 3 on average (some 4, some none) in 70 ms (n-gram,
        batch 16), so there a wider step may be cheaper and only the plain step is a floor."""
        if not self.plain_step_s or not self.step_s:
            return None
        own = dict(self.step_s_by_k).get(k) if k is not None else None
        monotone = self.engine == "vocabcheck" or not own
        held, best = [], 1.0
        for w, seconds in sorted(own or self.step_s):  # on vocabcheck's decoder a wider step never costs less
            best = max(best if monotone else 1.0, seconds / self.plain_step_s)
            held.append((w, best))
        below = [(w, r) for w, r in held if w <= width]
        above = [(w, r) for w, r in held if w >= width]
        if below and above and above[0][0] != below[-1][0]:
            (w0, r0), (w1, r1) = below[-1], above[0]
            ratio = r0 + (r1 - r0) * (width - w0) / (w1 - w0)
        else:
            ratio = below[-1][1] if below else above[0][1]
        # the forwards are vocabcheck's own: a floor for its decoder's steps, not for another engine's
        floor = self.forwards_cost(width) if self.full_width and width and self.engine == "vocabcheck" else 1.0
        return max(floor, ratio)

    def step_cost(self, k: int, widths: Sequence[tuple[int, int]] = ()) -> float | None:
        """What a step of a run proposing up to k costs on average, in plain-decoding steps, from the decoder's own
        steps (:meth:`width_cost`) weighted by how many of the run's steps verified each width (``widths``, from the
        replay over every prompt, each step counted once per row it ran: an n-gram step verifies only what its
        lookup found; a run's last steps propose only what is left); every step at width k where ``widths`` is not
        known. None where steps were not timed."""
        mix = [(w, n) for w, n in widths if n > 0] or [(k, 1)]
        priced = [(self.width_cost(w, k), n) for w, n in mix]
        if any(cost is None for cost, _ in priced):
            return None
        return sum(cost * n for cost, n in priced) / sum(n for _, n in priced)

    def forwards_cost(self, k: int) -> float:
        """k draft forwards and one verification over k + 1 tokens, in plain steps: k·c + v(k)."""
        return k * self.cost_ratio + self.verify_cost(k)

    def speedup(self, mean_accepted_length: float, k: int, widths: Sequence[tuple[int, int]] = ()) -> float:
        """Tokens per step over what the step costs, in plain steps: L / s(k), s the decoder's own step
        (:meth:`step_cost`), or L / (k·c + v(k)) from the forwards where its steps were not timed. Either cost is
        at least a plain step, so a speedup never exceeds the mean accepted length L, and a draft that accepts
        nothing (L = 1) never pays."""
        step = self.step_cost(k, widths)
        return mean_accepted_length / (step if step is not None else self.forwards_cost(k))


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
    engine: str = "vocabcheck"  # whose steps priced the speedups: vocabcheck's decoder, or "vLLM 0.32.0"

    @property
    def noise(self) -> str:
        """Why the predicted speedups cannot be ranked ("" where nothing says so): the costs' noise, each reason
        once. Acceptance does not depend on timing and stands either way."""
        reasons = (c.costs.noise for c in self.candidates if c.costs is not None and c.costs.noise)
        return "; ".join(dict.fromkeys(r for reason in reasons for r in reason.split("; ")))
