"""The costs a speedup depends on, measured in this process on this device, at the prediction's batch size.

**The decoder's own steps** (:func:`step_costs`): short generations by the decoder itself at every k and with no
speculation, interleaved, each step timed as ``-k auto``'s controller times it (from the end of the previous step to
the end of this one: the draft's passes and catch-up, the verification, the acceptance, the read-back and the host's
bookkeeping). A speedup is priced from them: tokens per step over the step's time in plain steps.

**The forwards** (:func:`target_costs`, :func:`draft_costs`): one plain target step, one draft forward, and one
verification pass by width (tokens per row), over a warm cache of a typical context, through the decoder's own
:class:`vocabcheck.decode.state.KVState` (and CPU output head); each the fastest of several timed forwards after a
warm-up, the cache rolled back after each. They give the cost ratio ``c`` and the verification cost the reports
show, and price a k where no step was timed.

Where other processes used more than :data:`vocabcheck.machine.BUSY_SHARE` of the CPUs while any of them ran, or the
steps' median round was more than :data:`NOISY_SPREAD` times their fastest, the costs say so (``Costs.noise``) and
`predict` says its speedups are too noisy to rank, instead of ranking them."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..decode.device import Clock, host_to_device
from ..decode.options import DecodeOptions
from ..decode.state import KVState
from ..machine import BUSY_SHARE, CpuSample
from ..methods import Method
from .result import Costs

REPEATS = 3  # timed rounds at least; more, up to MAX_REPEATS, while the rounds took under MIN_SECONDS
MAX_REPEATS = 200
MIN_SECONDS = 1.0
NOISY_SPREAD = 1.25  # a step width's median round over its fastest beyond which the machine was disturbing it
STEP_TOKENS = 64  # new tokens per row in each timed generation of the decoder's steps at most (the run's own length
# where shorter: a generation's last step proposes only what is left to generate, so its length sets the mean step)
STEP_ROUNDS = 3  # timed rounds of those generations, every k in each, after one warm-up round
STEP_SAMPLES = 8  # steps of a width in every round for its scatter across rounds to say the machine was disturbing it


class Timer:
    """One model's forward over a cache of ``context`` tokens for ``batch`` rows, timed by width."""

    def __init__(self, model, context: Sequence[int], batch: int, device,
                 to_input: Callable[[torch.Tensor], torch.Tensor] | None = None):
        self.state = KVState(model, batch, device)
        self.device, self.batch = device, batch
        self.to_input = to_input or (lambda ids: ids)
        self.clock = Clock(device)
        ids = host_to_device([list(context)] * batch, device)
        with torch.inference_mode():
            self.state.forward(self.to_input(ids), keep=1)
        self.token = int(context[-1])
        self.noise = ""  # why the last seconds() cannot be trusted (empty: nothing says so)

    def seconds(self, widths: Sequence[int]) -> dict[int, float]:
        """The fastest forward per width over interleaved rounds (after one warm-up round), so that a busy machine
        slows them alike; the fastest is the figure least disturbed by other processes. Small models get more rounds
        (a second of them, at most :data:`MAX_REPEATS`), large ones :data:`REPEATS`."""
        times: dict[int, list[float]] = {w: [] for w in widths}
        spent = 0.0
        before = CpuSample.now()
        with torch.inference_mode():
            for repeat in range(MAX_REPEATS + 1):
                if repeat > REPEATS and spent >= MIN_SECONDS:
                    break
                for width in widths:
                    elapsed = self._once(width)
                    if repeat:  # the first round is a warm-up
                        times[width].append(elapsed)
                        spent += elapsed
        # judged by the machine's load alone: a forward is a few milliseconds, and the median of hundreds of them sits
        # 1.3x above the fastest on a quiet shared machine; the fastest, which is what is kept, is the figure least
        # disturbed, and the speedups are priced by the decoder's steps (judged by their rounds' scatter as well)
        self.noise = _noise({}, CpuSample.now().others_share(before))
        return {w: min(t) for w, t in times.items()}

    def _once(self, width: int) -> float:
        ids = self.to_input(host_to_device([[self.token] * width] * self.batch, self.device))
        start = self.clock.now()
        self.state.forward(ids, keep=width)
        elapsed = self.clock.now() - start
        self.state.rollback(host_to_device([width] * self.batch, self.device), [width] * self.batch)
        return elapsed


def _noise(times: dict[int, list[float]], others: float | None) -> str:
    """Why timings cannot be trusted, or "": other processes busy beyond ``BUSY_SHARE`` of the CPUs, or a width
    whose median timing (a step's round) is ``NOISY_SPREAD`` times its fastest."""
    reasons = []
    if others is not None and others > BUSY_SHARE:
        reasons.append(f"other processes used {others:.0%} of the CPUs while costs were measured")
    spread = _spread(times)
    if spread > NOISY_SPREAD:
        reasons.append(f"a step width's median time was {spread:.2f}x its fastest")
    return "; ".join(reasons)


def _spread(times: dict[int, list[float]]) -> float:
    """The largest median over fastest timing across widths (1.0: every timing alike)."""
    return max((statistics.median(t) / min(t) for t in times.values() if t and min(t) > 0), default=1.0)


def target_costs(target, context: Sequence[int], batch: int, k_values: Sequence[int], device
                 ) -> tuple[float, tuple, str]:
    """One plain step and one verification of each k (k + 1 tokens per row), in seconds, and why they cannot be
    trusted ("" where nothing says so)."""
    widths = sorted({k + 1 for k in k_values})
    timer = Timer(target, context, batch, device)
    seconds = timer.seconds([1] + widths)
    return seconds[1], tuple((width, seconds[width]) for width in widths), timer.noise


def draft_costs(draft, to_input, context: Sequence[int], batch: int, device, target_step_s: float,
                verify_s: tuple, noise: str = "") -> Costs:
    """The costs of a pair: the target's (measured once, with its ``noise``) and one forward of this draft."""
    timer = Timer(draft, context, batch, device, to_input)
    draft_step = timer.seconds([1])[1]
    return Costs(target_step_s=target_step_s, draft_step_s=draft_step, verify_s=verify_s,
                 noise="; ".join(dict.fromkeys(r for r in (noise, timer.noise) if r)))


class StepTally:
    """Timed steps by width over rounds: each round's mean step per width (a step counted once per row it ran for), and
    the fewest steps a round met each width on. ``None`` is plain decoding."""

    def __init__(self) -> None:
        self.times: dict[int | None, list[float]] = {}
        self.fewest: dict[int | None, int] = {}
        self._seconds: dict[int | None, list[float]] = {}
        self._rows: dict[int | None, list[int]] = {}

    def add(self, width: int | None, seconds: float, live: int) -> None:
        self._seconds.setdefault(width, []).append(seconds * live)
        self._rows.setdefault(width, []).append(live)

    def end_round(self, timed: bool) -> None:
        """Close a round: its figures kept where ``timed`` (the first round is a warm-up)."""
        if timed:
            for width, samples in self._seconds.items():
                self.times.setdefault(width, []).append(sum(samples) / sum(self._rows[width]))
                self.fewest[width] = min(self.fewest.get(width, len(samples)), len(samples))
        self._seconds, self._rows = {}, {}

    def result(self, others: float | None) -> tuple[float, tuple[tuple[int, float], ...], str, float]:
        """The median round's plain step and step per width, in seconds; why they cannot be trusted ("" where nothing
        says so: ``others``, the share of the CPUs other processes used meanwhile, and the rounds' scatter); their
        spread. A width met on a few steps a round (the lookup found 3 once) is priced, but its rounds' scatter says
        nothing of the machine: the noise is judged on the widths every round met often."""
        times = dict(self.times)
        judged = {w: t for w, t in times.items() if len(t) >= STEP_ROUNDS and self.fewest[w] >= STEP_SAMPLES}
        plain = statistics.median(times.pop(None, [0.0]))
        return (plain, tuple((w, statistics.median(t)) for w, t in sorted(times.items())), _noise(judged, others),
                _spread(judged))


def step_costs(session, prompt_ids: Sequence[Sequence[int]], batch: int, method: Method, k_values: Sequence[int],
               max_new_tokens: int) -> tuple[float, tuple[tuple[int, float], ...], str, float]:
    """The decoder's own steps at ``batch`` rows, in seconds: its plain-decoding step, and a speculative run's mean
    step by the proposals it verified per row; why they cannot be trusted ("" where nothing says so); and their
    spread (the largest median over fastest round).

    Each round generates :data:`STEP_TOKENS` tokens per row (the run's own length where shorter) for the first
    ``batch`` prompts (repeated where there are fewer) with no speculation and at every k in turn, eos ignored,
    and sorts the speculative runs' steps by their width: what the run proposed per row (k for a draft model, but
    fewer at a generation's end; what the lookup found for n-gram lookup), so that a prediction prices each k by
    the widths its own replay over every prompt verifies (:meth:`Costs.step_cost`). A step counts once per row it
    ran for (a row's time per token is the mean of the steps it ran in; the steps after other rows finished are
    cheaper and serve fewer rows). A call's first step, which pays for the prefill's tail and the draft's, is no
    sample. A round's figure per width is its mean step; the figure is the median over :data:`STEP_ROUNDS` rounds
    after a warm-up round (the CPU head choosing its kernels, the allocator)."""
    prompts = first_prompts(prompt_ids, batch)
    tokens = max(2, min(max_new_tokens, STEP_TOKENS))
    ks = [0, *sorted(set(k_values))]
    tally = StepTally()
    before = CpuSample.now()
    for repeat in range(STEP_ROUNDS + 1):
        for k in ks:
            def record(forwards, slots, elapsed, live, catch_up, plain=not k) -> None:
                if elapsed is not None and live:
                    tally.add(None if plain else slots // live - 1, elapsed, live)

            options = DecodeOptions(method=method if k else Method.NONE, k=k or 1, max_new_tokens=tokens,
                                    ignore_eos=True)
            session.generate_ids(prompts, options, on_step=record)
        tally.end_round(timed=repeat > 0)
    return tally.result(CpuSample.now().others_share(before))


def engine_step_costs(start: Callable[..., Any], batch_sizes: Sequence[int], k_values: Sequence[int],
                      max_new_tokens: int) -> dict[int, tuple[float, tuple[tuple[int, float], ...], str, float, float,
                                                         tuple[tuple[int, tuple[tuple[int, float], ...]], ...]]]:
    """An engine's own steps (vLLM's) per batch size, as :func:`step_costs` measures the decoder's, and its *idle* step:
    a speculative engine's step where its table schedules k = 0 (vLLM keeps the speculative engine's scheduling there —
    on vLLM 0.32's CPU build an n-gram engine drafting nothing ran at 0.88x of the plain engine at batch 16 —, so a
    served 0 is not plain decoding). vLLM fixes k when it starts, so ``start(k)`` starts an engine at k (0: no
    speculative config) and ``start(k, idle=True)`` one with ``num_speculative_tokens`` k and a table of 0 at every
    batch size; each has ``steps(batch_size, tokens)`` → (seconds, rows, proposals drafted, or None where the engine
    drafts k for every row) per decode step, ``cpu_s`` (its process's CPU seconds so far: its work is not another
    process's load) and ``close()`` (:class:`vocabcheck.engines.vllm_worker.EngineProcess`). The plain engine runs
    throughout; one other engine at a time runs beside it (two engines' memory, whatever the k values) — each k's, then
    the idle one at the largest k —, every batch size, one warm-up round and :data:`STEP_ROUNDS` timed rounds
    interleaving the two. A step's width is what the engine drafted per row in it (the rows' mean, rounded); plain
    decoding's figure is the median over every engine's rounds. A step's cost depends on the engine's k, not on its
    width alone (vLLM 0.32's CPU build, n-gram at batch 16: the k = 4 engine's steps where every row drafted 4 took
    44 ms, the k = 8 engine's steps of a mean of 4 took 114 ms), so each k's steps are also kept apart, to price that
    k. Per batch size: (plain step, steps by width over every k's engine, noise, spread, idle step, and per k its own
    engine's steps by width)."""
    tokens = max(2, min(max_new_tokens, STEP_TOKENS))
    tallies = {batch: StepTally() for batch in batch_sizes}
    idle = {batch: StepTally() for batch in batch_sizes}  # the idle engine's steps, as a tally's plain steps
    ks = sorted(set(k_values))
    own = {batch: {k: StepTally() for k in ks} for batch in batch_sizes}  # each k's engine's steps apart
    before = CpuSample.now()
    plain = start(0)
    used = plain.cpu_s  # started inside the window
    try:
        for k, is_idle in [(k, False) for k in ks] + [(ks[-1], True)]:
            engine = start(k, idle=True) if is_idle else start(k)
            used += engine.cpu_s
            try:
                for batch in batch_sizes:
                    for repeat in range(STEP_ROUNDS + 1):
                        for running in (plain, engine):
                            was = running.cpu_s
                            for seconds, live, drafted in running.steps(batch, tokens):
                                if running is plain:
                                    tallies[batch].add(None, seconds, live)
                                elif is_idle:
                                    idle[batch].add(None, seconds, live)
                                else:
                                    width = k if drafted is None else round(drafted / live)
                                    tallies[batch].add(width, seconds, live)
                                    own[batch][k].add(width, seconds, live)
                            used += running.cpu_s - was
                        for tally in (tallies[batch], idle[batch], *own[batch].values()):
                            tally.end_round(timed=repeat > 0)
            finally:
                engine.close()
    finally:
        plain.close()
    others = CpuSample.now().others_share(before, own_children=used)
    out = {}
    for batch, tally in tallies.items():
        plain_s, steps, noise, spread = tally.result(others)
        idle_s, _, idle_noise, idle_spread = idle[batch].result(None)
        out[batch] = (plain_s, steps, "; ".join(dict.fromkeys(r for r in (noise, idle_noise) if r)),
                      max(spread, idle_spread), idle_s,
                      tuple((k, own[batch][k].result(None)[1]) for k in ks))
    return out


def first_prompts(prompt_ids: Sequence[Sequence[int]], batch: int) -> list[list[int]]:
    """The first ``batch`` prompts, repeated where there are fewer."""
    return [list(prompt_ids[i % len(prompt_ids)]) for i in range(batch)]
