"""Warping and the acceptance rule of speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

Temperature, top-k and top-p are applied to the target's p and the draft's q alike, so the output follows the
target's *warped* distribution. A proposal x drawn from q is accepted with probability min(1, p(x) / q(x)); on
rejection the token is drawn from max(0, p - q) renormalised; when every proposal is accepted, a bonus token is
drawn from p. The output token then has distribution exactly p:

    P(y) = q(y) min(1, p(y)/q(y)) + (1 - sum_x q(x) min(1, p(x)/q(x))) * residual(y) = p(y).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import BadOption


@dataclass(frozen=True)
class Sampling:
    """``temperature == 0`` is greedy decoding; ``top_k == 0`` and ``top_p == 1`` switch those filters off."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise BadOption(f"--temperature must be 0 (greedy) or more, not {self.temperature}")
        if self.top_k < 0:
            raise BadOption(f"--top-k must be 0 (off) or more, not {self.top_k}")
        if not (math.isfinite(self.top_p) and 0.0 < self.top_p <= 1.0):
            raise BadOption(f"--top-p must be in (0, 1] (1 is off), not {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def warp(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Probabilities after temperature, top-k and top-p, over the last dimension (computed in float32)."""
    logits = logits.float()
    if sampling.temperature != 1.0:
        logits = logits / sampling.temperature
    if sampling.top_k and sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs  # mass of the tokens ranked above this one
        ordered = ordered.masked_fill(before >= sampling.top_p, float("-inf"))  # the top token always stays
        logits = torch.empty_like(logits).scatter_(-1, order, ordered)
    return torch.softmax(logits, dim=-1)


def acceptance_probability(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """min(1, p(x) / q(x)) for proposals x drawn from q (so q(x) > 0)."""
    return torch.clamp(p_x / q_x, max=1.0)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """max(0, p - q) renormalised: where a rejected position draws its token. Equal p and q never reject; the
    degenerate all-zero residual falls back to p."""
    r = torch.clamp(p - q, min=0.0)
    total = r.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, r / total.clamp(min=torch.finfo(r.dtype).tiny), p)


def draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row of a [..., V] probability tensor, by inverting its cumulative distribution (float64): the
    first i whose cumulative probability exceeds u · total, u uniform in [0, 1), so token i comes with probability
    p_i / sum(p) and a zero-probability token never. One uniform number per row and no host sync; on the CPU it is
    about 30 times faster than ``torch.multinomial`` over a 152,064-row vocabulary."""
    cumulative = probs.double().cumsum(dim=-1)
    u = torch.rand((*probs.shape[:-1], 1), generator=generator, device=probs.device, dtype=torch.float64)
    picked = torch.searchsorted(cumulative, u * cumulative[..., -1:], right=True)
    return picked.squeeze(-1).clamp_(max=probs.shape[-1] - 1)
