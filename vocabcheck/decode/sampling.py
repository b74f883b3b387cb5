"""Warping and the acceptance rule of speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

Temperature, top-k and top-p are applied to the target's p and the draft's q alike, so the output follows the
target's *warped* distribution. A proposal x drawn from q is accepted with probability min(1, p(x) / q(x)); on
rejection the token is drawn from max(0, p - q) renormalised; when every proposal is accepted, a bonus token is
drawn from p. The output token then has distribution exactly p:

    P(y) = q(y) min(1, p(y)/q(y)) + (1 - sum_x q(x) min(1, p(x)/q(x))) * residual(y) = p(y).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..errors import BadOption, UnsupportedModel


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


# float32's range for the temperature the logits are divided by: every positive temperature below the smallest
# subnormal (2**-149, the nearest to 0 that float32 holds) warps as that one, every one above float32's maximum as it.
_FLOAT32_TEMPERATURES = (2.0 ** -149, torch.finfo(torch.float32).max)


def warp(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Probabilities after temperature, top-k and top-p, over the last dimension (computed in float32).

    Below temperature 1 the logits are shifted by their maximum before the division, so no quotient can overflow to
    +inf (which made softmax NaN): a temperature so small that every other logit's quotient underflows to -inf gives
    the greedy limit, a point mass on the argmax (spread evenly over exact ties), never a NaN."""
    logits = logits.float()
    if sampling.temperature != 1.0:
        low, high = _FLOAT32_TEMPERATURES
        if sampling.temperature < 1.0:
            logits = logits - logits.amax(dim=-1, keepdim=True)
        logits = logits / min(max(sampling.temperature, low), high)
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
    about 30 times faster than ``torch.multinomial`` over a 152,064-row vocabulary.

    A row that is not a distribution (a NaN or an infinity anywhere, or no positive mass) has no token to give: its
    pick is :data:`NO_TOKEN`, which no vocabulary has, so the step fails loudly (:func:`check_drawn`) instead of
    emitting a made-up id."""
    cumulative = probs.double().cumsum(dim=-1)
    total = cumulative[..., -1:]
    u = torch.rand((*probs.shape[:-1], 1), generator=generator, device=probs.device, dtype=torch.float64)
    picked = torch.searchsorted(cumulative, u * total, right=True).clamp_(max=probs.shape[-1] - 1)
    usable = torch.isfinite(total) & (total > 0)  # a NaN anywhere makes the total NaN
    return torch.where(usable, picked, NO_TOKEN).squeeze(-1)


NO_TOKEN = -1
"""What :func:`draw` (and :func:`pick_greedy`) gives a row whose probabilities are not a distribution."""
NO_PROPOSAL = -2
"""What the step reads back for a row whose draft gave such a row (:func:`vocabcheck.decode.verify.emitted_tokens`):
never an index, since the proposer fed and proposed a placeholder id in its place."""


def pick_greedy(logits: torch.Tensor, ids: torch.Tensor | None = None) -> torch.Tensor:
    """Each row's argmax over the last dimension (as ``ids[argmax]`` where ``ids`` is given), or :data:`NO_TOKEN`
    where the row is not the logits of a distribution (a NaN or +inf anywhere, or nothing above -inf): the greedy
    counterpart of :func:`draw`, with no host sync (``max`` propagates a NaN)."""
    best, index = first_max(logits)
    if ids is not None:
        index = ids[index]
    return torch.where(torch.isfinite(best), index, NO_TOKEN)


def check_drawn(tokens: Sequence[int]) -> None:
    """Refuse to emit :data:`NO_TOKEN` or :data:`NO_PROPOSAL`: the probabilities it was drawn from (the model's, or
    the draft's) were not finite (the logits held a NaN or an infinity), and no token follows from them."""
    if NO_PROPOSAL in tokens:
        raise UnsupportedModel("the draft model's next-token probabilities are not finite (its logits hold a NaN or "
                               "an infinity): no proposal can be drawn from them; plain decoding (--method none) "
                               "runs the target without it")
    if NO_TOKEN in tokens:
        raise UnsupportedModel("the model's next-token probabilities are not finite (its logits hold a NaN or an "
                               "infinity): no token can be drawn from them")


GREEDY_BLOCK = 512  # logits per block in the CPU's two-pass argmax (:func:`first_max`)


def first_max(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``logits.max(dim=-1)``: each row's maximum (NaN where the row holds one) and the index of its first occurrence.
    On the CPU in two passes that vectorise — the maximum of every block of ``GREEDY_BLOCK`` logits, then the first
    block holding the row's maximum searched with ``max`` —, where torch's ``max`` with indices does not: over the
    demo's 152,064 rows it took 1.5–3.2 ms for 16 rows and 3.9–9.1 ms for 48 against 0.3 ms and 1.2–1.8 ms, 15 % of a
    batch-16 draft call (one for every verification and every draft forward; docs/decoder.md has the timing). Elsewhere
    ``max`` itself."""
    size = logits.shape[-1]
    if logits.device.type != "cpu" or size < 2 * GREEDY_BLOCK or logits.numel() == 0:
        return logits.max(dim=-1)
    flat = logits.reshape(-1, size)
    whole = size - size % GREEDY_BLOCK
    blocks = flat[:, :whole].reshape(flat.shape[0], -1, GREEDY_BLOCK).amax(dim=-1)  # amax propagates a NaN
    if whole < size:
        blocks = torch.cat([blocks, flat[:, whole:].amax(dim=-1, keepdim=True)], dim=1)
    best, block = blocks.max(dim=-1)  # the first block holding the maximum
    start = block * GREEDY_BLOCK
    # a last block shorter than the others repeats the row's last logit after it: never before the first occurrence
    columns = (start[:, None] + torch.arange(GREEDY_BLOCK)).clamp_(max=size - 1)
    index = start + flat.gather(1, columns).max(dim=-1).indices
    return best.reshape(logits.shape[:-1]), index.reshape(logits.shape[:-1])
