"""Where proposals come from: prompt lookup (n-grams of the row's own context) or a draft model.

A proposer gives each live row up to ``width`` target ids as :class:`Proposals`, is told after the step's one host
sync how many each row accepted (``commit``), and forgets rows that finished (``keep_rows``). The draft proposer keeps
its proposals on the device; its cache runs in lockstep with the target's and is rolled back past the first
rejection. How the draft's vocabulary meets the target's is its mapping's business (:mod:`vocabcheck.decode.mapping`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .device import host_to_device
from .mapping import PaddedMapping
from .ngram import NgramIndex
from .sampling import Sampling, draw, warp
from .state import KVState


@dataclass(frozen=True)
class Proposals:
    """``tokens`` [B, width] target ids on the device, left-aligned (proposal j of a row in column j).
    ``lengths`` is each row's count of real proposals (the rest of its columns are padding), None when every row
    has ``width``. ``q`` [B, width, V] holds the distributions sampled proposals were drawn from (None for greedy
    drafts and for n-gram proposals, whose q is a point mass). ``host`` holds the tokens where the host made them."""

    tokens: torch.Tensor
    lengths: list[int] | None = None
    q: torch.Tensor | None = None
    host: list[list[int]] | None = None
    device_lengths: torch.Tensor | None = None  # ``lengths`` on the device, where they are given

    @property
    def width(self) -> int:
        return self.tokens.shape[1]

    def lengths_on_device(self) -> torch.Tensor:
        """Each row's count of real proposals, [B], on the tokens' device."""
        if self.device_lengths is not None:
            return self.device_lengths
        return torch.full((self.tokens.shape[0],), self.width, dtype=torch.long, device=self.tokens.device)

    def length(self, row: int) -> int:
        return self.width if self.lengths is None else self.lengths[row]


class NgramProposer:
    """Prompt lookup per row: the tokens that followed the latest earlier occurrence of the row's last n tokens."""

    def __init__(self, contexts: Sequence[Sequence[int]], n_min: int, n_max: int, device: torch.device):
        self.lookups = []
        for context in contexts:
            index = NgramIndex(n_min, n_max)
            index.extend(context)
            self.lookups.append(index)
        self.device = device

    def propose(self, width: int, sampling: Sampling, generator: torch.Generator) -> Proposals:
        found = [lookup.propose(width) for lookup in self.lookups]
        widest = max(len(p) for p in found)
        padded = [p + [0] * (widest - len(p)) for p in found]
        lengths = [len(p) for p in found]
        tokens = host_to_device(padded, self.device, shape=(len(found), widest))
        if min(lengths) == widest:
            return Proposals(tokens=tokens, host=found)
        return Proposals(tokens=tokens, lengths=lengths, host=found,
                         device_lengths=host_to_device(lengths, self.device))

    def commit(self, emitted: Sequence[Sequence[int]], proposals: Proposals, count: torch.Tensor,
               count_host: list[int], chosen: torch.Tensor) -> None:
        for lookup, tokens in zip(self.lookups, emitted):
            lookup.extend(tokens)

    def keep_rows(self, live: list[int], rows: torch.Tensor) -> None:
        self.lookups = [self.lookups[i] for i in live]


class DraftProposer:
    """A draft model whose distributions the mapping turns into distributions over the target's rows."""

    def __init__(self, draft, mapping: PaddedMapping, batch: int, device: torch.device):
        self.state = KVState(draft, batch, device)
        self.mapping = mapping
        self.pending: torch.Tensor | None = None  # [B, P] draft ids the draft has not seen yet (left-padded)
        self.pending_real: torch.Tensor | None = None  # which of them are real; None: all

    def prefill(self, prompts: Sequence[Sequence[int]], ids: torch.Tensor, real: torch.Tensor | None,
                first: torch.Tensor, first_host: list[int]) -> None:
        """The prompts (``ids`` as the target's left-padded batch) through the draft; the first token is owed."""
        self.state.forward(self.mapping.to_draft(ids), keep=1, real=real)
        self.pending, self.pending_real = self.mapping.to_draft(first[:, None]), None

    def propose(self, width: int, sampling: Sampling, generator: torch.Generator) -> Proposals:
        tokens, real = self.pending, self.pending_real
        picks, dists = [], []
        for _ in range(width):
            draft_logits = self.state.forward(tokens, keep=1, real=real)[:, -1]
            if sampling.greedy:
                pick = self.mapping.greedy(draft_logits)
            else:
                q = warp(self.mapping.logits(draft_logits), sampling)
                pick = draw(q, generator)
                dists.append(q)
            picks.append(pick)
            tokens, real = self.mapping.to_draft(pick[:, None]), None
        return Proposals(tokens=torch.stack(picks, dim=1), q=torch.stack(dists, dim=1) if dists else None)

    def commit(self, emitted, proposals: Proposals, count: torch.Tensor, count_host: list[int],
               chosen: torch.Tensor) -> None:
        """The draft saw its pending tokens and all proposals but the last: it keeps the accepted ones and owes the
        rest — the last proposal where all were accepted — and the target's token."""
        width = proposals.width
        owed = self.mapping.to_draft(chosen[:, None])
        if width == 0:
            self.pending = torch.cat([self.pending, owed], dim=1)
            if self.pending_real is not None:
                self.pending_real = torch.cat([self.pending_real, torch.ones_like(owed, dtype=torch.bool)], dim=1)
            return
        self.state.rollback((width - 1 - count).clamp(min=0), [max(0, width - 1 - n) for n in count_host])
        full = [n == width for n in count_host]
        if not any(full):
            self.pending, self.pending_real = owed, None
            return
        self.pending = torch.cat([self.mapping.to_draft(proposals.tokens[:, -1:]), owed], dim=1)
        accepted_all = count == width
        self.pending_real = None if all(full) else torch.stack([accepted_all, torch.ones_like(accepted_all)], dim=1)

    def keep_rows(self, live: list[int], rows: torch.Tensor) -> None:
        self.state.keep_rows(rows)
        self.pending = self.pending[rows]
        self.pending_real = None if self.pending_real is None else self.pending_real[rows]
