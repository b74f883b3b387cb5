"""The costs a speedup depends on, measured in this process on this device: one plain target step, one draft
forward, and one verification pass by width (tokens per row), each at the prediction's batch size over a warm cache
of a typical context, through the decoder's own :class:`vocabcheck.decode.state.KVState` (and CPU output head).

Each figure is the fastest of several timed forwards after a warm-up; the cache is rolled back after each, so
every forward sees the same context."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..decode.device import Clock, host_to_device
from ..decode.state import KVState
from .result import Costs

REPEATS = 3  # timed rounds at least; more, up to MAX_REPEATS, while the rounds took under MIN_SECONDS
MAX_REPEATS = 200
MIN_SECONDS = 1.0


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

    def seconds(self, widths: Sequence[int]) -> dict[int, float]:
        """The fastest forward per width over interleaved rounds (after one warm-up round), so that a busy machine
        slows them alike; the fastest is the figure least disturbed by other processes. Small models get more rounds
        (a second of them, at most :data:`MAX_REPEATS`), large ones :data:`REPEATS`."""
        times: dict[int, list[float]] = {w: [] for w in widths}
        spent = 0.0
        with torch.inference_mode():
            for repeat in range(MAX_REPEATS + 1):
                if repeat > REPEATS and spent >= MIN_SECONDS:
                    break
                for width in widths:
                    elapsed = self._once(width)
                    if repeat:  # the first round is a warm-up
                        times[width].append(elapsed)
                        spent += elapsed
        return {w: min(t) for w, t in times.items()}

    def _once(self, width: int) -> float:
        ids = self.to_input(host_to_device([[self.token] * width] * self.batch, self.device))
        start = self.clock.now()
        self.state.forward(ids, keep=width)
        elapsed = self.clock.now() - start
        self.state.rollback(host_to_device([width] * self.batch, self.device), [width] * self.batch)
        return elapsed


def target_costs(target, context: Sequence[int], batch: int, k_values: Sequence[int], device) -> tuple[float, tuple]:
    """One plain step and one verification of each k (k + 1 tokens per row), in seconds."""
    widths = sorted({k + 1 for k in k_values})
    seconds = Timer(target, context, batch, device).seconds([1] + widths)
    return seconds[1], tuple((width, seconds[width]) for width in widths)


def draft_costs(draft, to_input, context: Sequence[int], batch: int, device, target_step_s: float,
                verify_s: tuple) -> Costs:
    """The costs of a pair: the target's (measured once) and one forward of this draft."""
    draft_step = Timer(draft, context, batch, device, to_input).seconds([1])[1]
    return Costs(target_step_s=target_step_s, draft_step_s=draft_step, verify_s=verify_s)
