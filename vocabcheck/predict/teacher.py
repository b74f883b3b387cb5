"""Teacher-forced passes: a model over [prompt + the target's continuation] in one forward per batch of rows, at
prefill speed. At position p of a continuation the logits are the model's prediction given the target's own prefix,
which is exactly what a proposer sees in the decoder at a step that starts there.

Rows go through :class:`vocabcheck.decode.state.KVState` left-padded, as the decoder's prefill does (positions and
masks by row), in groups small enough that the kept logits stay within :data:`LOGIT_BUDGET` floats.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from ..decode.proposers import left_pad
from ..decode.sampling import Sampling, warp
from ..decode.state import KVState
from .steps import streaks

LOGIT_BUDGET = 64_000_000  # floats of kept logits per forward (256 MB in float32)


@dataclass(frozen=True)
class Chain:
    """One prompt (target ids) and the target's continuation after it."""

    prompt: tuple[int, ...]
    tokens: tuple[int, ...]


def forced_logits(model, chains: Sequence[Chain], device,
                  to_input: Callable[[torch.Tensor], torch.Tensor] | None = None,
                  on_pass: Callable[[], None] | None = None) -> Iterator[tuple[int, torch.Tensor]]:
    """(row index, logits [len(tokens) - 1, V]) for each chain with more than one token: the logits predicting
    tokens 1 … n - 1 of its continuation. ``to_input`` turns target ids into the model's input ids."""
    rows = [i for i, c in enumerate(chains) if len(c.tokens) > 1]
    vocab = model.get_output_embeddings().weight.shape[0]
    for group in _groups(rows, chains, vocab):
        ids, real = left_pad([list(chains[i].prompt) + list(chains[i].tokens[:-1]) for i in group], device)
        keep = max(len(chains[i].tokens) for i in group) - 1
        with torch.inference_mode():
            state = KVState(model, len(group), device)
            logits = state.forward(to_input(ids) if to_input else ids, keep=keep, real=real)
        if on_pass is not None:
            on_pass()
        for slot, i in enumerate(group):
            yield i, logits[slot, keep - (len(chains[i].tokens) - 1):]


def _groups(rows: list[int], chains: Sequence[Chain], vocab: int) -> Iterator[list[int]]:
    group: list[int] = []
    for i in rows:
        if group and (len(group) + 1) * max(len(chains[j].tokens) for j in group + [i]) * vocab > LOGIT_BUDGET:
            yield group
            group = []
        group.append(i)
    if group:
        yield group


def greedy_streaks(draft, mapping, chains: Sequence[Chain], device, on_pass=None) -> list[tuple[int, ...]]:
    """Per row and position p ≥ 1 (index 0 unused), how many of the draft's greedy proposals from p on equal the
    target's tokens — the draft's argmax given the target's prefix, through the pair's mapping."""
    out: list[tuple[int, ...]] = [(0,) for _ in chains]
    for i, logits in forced_logits(draft, chains, device, mapping.to_draft, on_pass):
        picks = mapping.greedy(logits).tolist()
        tokens = chains[i].tokens
        out[i] = (0,) + streaks([pick == token for pick, token in zip(picks, tokens[1:])])
    return out


def acceptance(target, draft, mapping, chains: Sequence[Chain], sampling: Sampling, device,
               on_pass=None) -> list[tuple[float, ...]]:
    """Per row and position p ≥ 1 (index 0 unused), Σ min(p, q): the probability that the draft's proposal there is
    accepted, with both distributions warped as the decoder warps them."""
    out: list[tuple[float, ...]] = [(0.0,) for _ in chains]
    drafts = forced_logits(draft, chains, device, mapping.to_draft, on_pass)
    for (i, p_logits), (_, q_logits) in zip(forced_logits(target, chains, device, None, on_pass), drafts):
        p = warp(p_logits, sampling)
        q = warp(mapping.logits(q_logits), sampling)
        out[i] = (0.0,) + tuple(torch.minimum(p, q).sum(dim=-1).tolist())
    return out


def point_acceptance(target, chains: Sequence[Chain], proposals: Sequence[Sequence[Sequence[int]]],
                     sampling: Sampling, device, on_pass=None) -> list[list[list[float]]]:
    """For n-gram proposals (a point mass q): per row, position p and proposal j, the target's warped probability of
    proposal j at position p + j of the chain."""
    out: list[list[list[float]]] = [[[]] for _ in chains]
    for i, logits in forced_logits(target, chains, device, None, on_pass):
        p = warp(logits, sampling)  # row r predicts token r + 1
        row = [[]]
        for at, proposed in enumerate(proposals[i][1:], start=1):
            row.append([float(p[at + j - 1, token]) for j, token in enumerate(proposed) if at + j - 1 < p.shape[0]])
        out[i] = row
    return out
