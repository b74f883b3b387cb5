"""The costs a speedup depends on, measured in this process on this device: one plain target step, one draft
forward, and one verification pass by width (tokens per row), each at the prediction's batch size over a warm cache
of a typical context, through the decoder's own :class:`vocabcheck.decode.state.KVState` (and CPU output head).

Each figure is the fastest of several timed forwards after a warm-up; the cache is rolled back after each, so
every forward sees the same context. Where other processes used more than :data:`vocabcheck.machine.BUSY_SHARE` of
the CPUs while they ran, or a width's median forward was more than :data:`NOISY_SPREAD` times its fastest, the costs
say so (``Costs.noise``) and `predict` says its speedups are too noisy to rank, instead of ranking them."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import torch

from ..decode.device import Clock, host_to_device
from ..decode.state import KVState
from ..machine import BUSY_SHARE, CpuSample
from .result import Costs

REPEATS = 3  # timed rounds at least; more, up to MAX_REPEATS, while the rounds took under MIN_SECONDS
MAX_REPEATS = 200
MIN_SECONDS = 1.0
NOISY_SPREAD = 1.25  # a width's median forward over its fastest beyond which the machine was disturbing it


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
        self.spread = 1.0  # the last seconds()' largest median over fastest forward, across widths

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
        self.noise = _noise(times, CpuSample.now().others_share(before))
        self.spread = _spread(times)
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
    whose median forward is ``NOISY_SPREAD`` times its fastest."""
    reasons = []
    if others is not None and others > BUSY_SHARE:
        reasons.append(f"other processes used {others:.0%} of the CPUs while costs were measured")
    spread = _spread(times)
    if spread > NOISY_SPREAD:
        reasons.append(f"a forward's median time was {spread:.2f}x its fastest")
    return "; ".join(reasons)


def _spread(times: dict[int, list[float]]) -> float:
    """The largest median over fastest forward across widths (1.0: every timing alike)."""
    return max((statistics.median(t) / min(t) for t in times.values() if t and min(t) > 0), default=1.0)


def target_costs(target, context: Sequence[int], batch: int, k_values: Sequence[int], device
                 ) -> tuple[float, tuple, str, float]:
    """One plain step and one verification of each k (k + 1 tokens per row), in seconds, why they cannot be
    trusted ("" where nothing says so), and their spread (:func:`_spread`)."""
    widths = sorted({k + 1 for k in k_values})
    timer = Timer(target, context, batch, device)
    seconds = timer.seconds([1] + widths)
    return seconds[1], tuple((width, seconds[width]) for width in widths), timer.noise, timer.spread


def draft_costs(draft, to_input, context: Sequence[int], batch: int, device, target_step_s: float,
                verify_s: tuple, noise: str = "", spread: float = 1.0) -> Costs:
    """The costs of a pair: the target's (measured once, with its ``noise``) and one forward of this draft."""
    timer = Timer(draft, context, batch, device, to_input)
    draft_step = timer.seconds([1])[1]
    return Costs(target_step_s=target_step_s, draft_step_s=draft_step, verify_s=verify_s,
                 noise="; ".join(dict.fromkeys(r for r in (noise, timer.noise) if r)), spread=max(spread, timer.spread))
