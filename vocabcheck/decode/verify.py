"""Verification: one target pass over each row's [newest token, proposals], and the acceptance rule applied to it.

Rows are left-padded to the batch's widest chunk, so the target's logits for proposal j of a row with n proposals sit
at slot (width - n) + j. Greedy decoding accepts the longest prefix of proposals equal to the target's argmax chain
and emits the argmax after it; sampling accepts proposal x with probability min(1, p(x) / q(x)) and draws the token
after the first rejection from the residual (:mod:`vocabcheck.decode.sampling`). Everything stays on the device.
"""

from __future__ import annotations

import torch

from .proposers import Proposals, left_pad
from .sampling import NO_PROPOSAL, Sampling, acceptance_probability, draw, pick_greedy, residual, warp
from .state import KVState


def verify(state: KVState, last: torch.Tensor, last_host: list[int], proposals: Proposals) -> torch.Tensor:
    """Logits [B, width + 1, V] of the target over each row's newest token and its proposals."""
    width = proposals.width
    if proposals.lengths is None:
        return state.forward(torch.cat([last[:, None], proposals.tokens], dim=1), keep=width + 1)
    tokens, real = left_pad([[t] + p for t, p in zip(last_host, proposals.host)], last.device)
    return state.forward(tokens, keep=width + 1, real=real)


def accept(logits: torch.Tensor, proposals: Proposals, sampling: Sampling,
           generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """How many proposals each row accepts [B], and the token that follows them [B] (correction or bonus)."""
    width = proposals.width
    device = logits.device
    proposed = proposals.tokens
    lengths = proposals.lengths_on_device()
    slots = None  # each row's own slots [B, width + 1] where rows proposed fewer than the width (left-padded)
    if proposals.lengths is not None:
        slots = ((width - lengths)[:, None] + torch.arange(width + 1, device=device)[None, :]).clamp(max=width)
    valid = torch.arange(width, device=device)[None, :] < lengths[:, None]
    rows = torch.arange(proposed.shape[0], device=device)
    if sampling.greedy:
        best = pick_greedy(logits)  # [B, width + 1]; NO_TOKEN where the logits are not finite
        if slots is not None:  # a slot's pick is its own: the picks are gathered, not the logits (a copy of them all)
            best = best.gather(1, slots)
        count = ((best[:, :width] == proposed) & valid).long().cumprod(dim=1).sum(dim=1)
        return count, best[rows, count]
    # each row's own slots by indexing: a gather over V, expanded, took 35 ms on the CPU for 16 rows of width 4 of the
    # demo's head, indexing 10 ms
    target_logits = logits if slots is None else logits[rows[:, None], slots]  # [B, width + 1, V]
    p = warp(target_logits, sampling)  # [B, width + 1, V]
    p_x = p[:, :width].gather(2, proposed[:, :, None]).squeeze(2)
    q = proposals.q
    q_x = q.gather(2, proposed[:, :, None]).squeeze(2) if q is not None else torch.ones_like(p_x)
    u = torch.rand(p_x.shape, generator=generator, device=device)
    hits = (u < acceptance_probability(p_x, q_x.clamp(min=1e-30))) & valid
    count = hits.long().cumprod(dim=1).sum(dim=1)
    p_n = p[rows, count]  # [B, V]: the distribution at the first unaccepted position (or the bonus position)
    rejected = (count < lengths)[:, None]
    if q is not None:
        q_n = q[rows, count.clamp(max=max(width - 1, 0))] if width else torch.zeros_like(p_n)
    else:  # n-gram: q is a point mass on the proposed token
        point = proposed[rows, count.clamp(max=max(width - 1, 0))] if width else torch.zeros_like(count)
        q_n = torch.nn.functional.one_hot(point, p_n.shape[-1]).to(p_n.dtype)
    return count, draw(residual(p_n, torch.where(rejected, q_n, torch.zeros_like(p_n))), generator)


def emitted_tokens(proposals: Proposals, count: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """[B, 1 + width + 1]: each row's accepted count, then its accepted proposals and the target's token (the rest
    of the row repeats that token). This is what the host reads back, in one copy. A row whose draft gave a
    distribution that is not finite reads back NO_PROPOSAL in place of every token (the engine refuses it)."""
    width = proposals.width
    columns = torch.arange(width + 1, device=count.device)[None, :]
    padded = torch.nn.functional.pad(proposals.tokens, (0, 1))
    tokens = torch.where(columns < count[:, None], padded, chosen[:, None])
    if proposals.not_finite is not None:
        tokens = tokens.masked_fill(proposals.not_finite[:, None], NO_PROPOSAL)
    return torch.cat([count[:, None], tokens], dim=1)
